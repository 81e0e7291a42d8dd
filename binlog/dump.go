package binlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// events is where the stream takes its events from: go-mysql's streamer,
// or taggedDump.
type events interface {
	GetEvent(ctx context.Context) (*replication.BinlogEvent, error)
}

// taggedDump reads the binary log from a MySQL GTID set that holds tagged
// GTIDs. go-mysql's syncer cannot start from one: it keeps a copy of the
// set as its own untagged type and fails at the second transaction. The
// dump is what the syncer sends (COM_BINLOG_DUMP_GTID, the checksum and
// heartbeat session settings) with the set in MySQL's tagged encoding
// (mysqlSet.Encode), each packet parsed by go-mysql's parser.
type taggedDump struct {
	conn   *client.Conn
	parser *replication.BinlogParser
	ch     chan dumped
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

type dumped struct {
	ev  *replication.BinlogEvent
	err error
}

// startTaggedDump connects as cfg says and asks for every transaction not
// in set.
func startTaggedDump(ctx context.Context, cfg replication.BinlogSyncerConfig, set *mysqlSet) (*taggedDump, error) {
	addr := cfg.Host
	if cfg.Port != 0 {
		addr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := client.ConnectWithDialer(dialCtx, "", addr, cfg.User, cfg.Password, "", cfg.Dialer, func(c *client.Conn) error {
		c.SetTLSConfig(cfg.TLSConfig)
		c.SetAttributes(map[string]string{"_client_role": "binary_log_listener"})
		return nil
	})
	if err != nil {
		return nil, err
	}
	d := &taggedDump{conn: conn, parser: replication.NewBinlogParser(), ch: make(chan dumped, 64), stop: make(chan struct{})}
	if err := d.start(cfg, set); err != nil {
		_ = conn.Close()
		return nil, err
	}
	d.wg.Add(1)
	go d.read(cfg.ReadTimeout)
	return d, nil
}

func (d *taggedDump) start(cfg replication.BinlogSyncerConfig, set *mysqlSet) error {
	// Checksum-aware, as the syncer and mysqlbinlog say they are.
	if _, err := d.conn.Execute(`SET @master_binlog_checksum='NONE', @source_binlog_checksum='NONE'`); err != nil {
		return err
	}
	if cfg.HeartbeatPeriod > 0 {
		if _, err := d.conn.Execute(fmt.Sprintf("SET @master_heartbeat_period = %d, @source_heartbeat_period = %d",
			cfg.HeartbeatPeriod, cfg.HeartbeatPeriod)); err != nil {
			return err
		}
	}
	gtids := set.Encode()
	// command, flags, server_id, file name length (0: by GTIDs), offset 4,
	// the set's length and bytes; the packet's own 4-byte header first.
	data := make([]byte, 4, 4+1+2+4+4+8+4+len(gtids))
	data = append(data, gomysql.COM_BINLOG_DUMP_GTID)
	data = binary.LittleEndian.AppendUint16(data, 0)
	data = binary.LittleEndian.AppendUint32(data, cfg.ServerID)
	data = binary.LittleEndian.AppendUint32(data, 0)
	data = binary.LittleEndian.AppendUint64(data, 4)
	data = binary.LittleEndian.AppendUint32(data, uint32(len(gtids)))
	data = append(data, gtids...)
	d.conn.ResetSequence()
	return d.conn.WritePacket(data)
}

// read turns packets into events until the connection ends or Close.
func (d *taggedDump) read(timeout time.Duration) {
	defer d.wg.Done()
	send := func(x dumped) bool {
		select {
		case d.ch <- x:
			return true
		case <-d.stop:
			return false
		}
	}
	for {
		if timeout > 0 {
			_ = d.conn.SetReadDeadline(time.Now().Add(timeout))
		}
		data, err := d.conn.ReadPacket()
		if err != nil {
			send(dumped{err: err})
			return
		}
		switch {
		case len(data) == 0:
			continue
		case data[0] == gomysql.ERR_HEADER:
			send(dumped{err: d.conn.HandleErrorPacket(data)})
			return
		case data[0] == gomysql.EOF_HEADER:
			send(dumped{err: errors.New("binlog: the server ended the dump")})
			return
		case data[0] != gomysql.OK_HEADER:
			continue
		}
		ev, err := d.parser.Parse(data[1:])
		if err != nil {
			send(dumped{err: err})
			return
		}
		if !send(dumped{ev: ev}) {
			return
		}
	}
}

// GetEvent returns the next event, or why there is none.
func (d *taggedDump) GetEvent(ctx context.Context) (*replication.BinlogEvent, error) {
	select {
	case x := <-d.ch:
		if x.err != nil {
			return nil, x.err
		}
		return x.ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close ends the dump and waits for its reader.
func (d *taggedDump) Close() {
	d.once.Do(func() {
		close(d.stop)
		_ = d.conn.Close()
		d.wg.Wait()
	})
}
