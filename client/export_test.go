package client

// ReaderRunning reports whether Start's binlog reader goroutine runs (it
// is set before Start returns and cleared once the reader has stopped).
func (c *Client) ReaderRunning() bool {
	c.readerMu.Lock()
	defer c.readerMu.Unlock()
	return c.readerStop != nil
}
