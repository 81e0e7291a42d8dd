package binlog

import "github.com/mendq/mend/storage"

// Resumable says why the reader could not resume p on this server ("" if
// it can), and whether that is because the server purged it: the reader's
// own rule, for doctor and mend status, which look without reading.
func (s Server) Resumable(p storage.BinlogPosition) (reason string, purged bool) {
	return (&term{srv: s}).resumable(p)
}
