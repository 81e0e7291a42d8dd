package mysqltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy on loopback, between a test's client and a server, for
// network faults: cut connections, latency, timeouts, resets.
type Proxy struct {
	mu    sync.Mutex // serialises Cut/Heal
	proxy *toxiproxy.Proxy
	addr  string
}

// NewProxy starts a proxy listening on 127.0.0.1:<free port> that forwards to upstream
// (host:port: a server's Addr), and stops it in t.Cleanup.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		t.Fatalf("mysqltest: proxy upstream %q: %v", upstream, err)
	}
	logger := zerolog.Nop()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	p := toxiproxy.NewProxy(api, "mysqltest", "127.0.0.1:0", upstream)
	p.Logger = &logger
	if err := p.Start(); err != nil {
		t.Fatalf("mysqltest: start proxy to %s: %v", upstream, err)
	}
	// After Start, Listen holds the bound address; Heal rebinds to the same port.
	px := &Proxy{proxy: p, addr: p.Listen}
	t.Cleanup(px.proxy.Stop)
	return px
}

// Addr returns the proxy's listening address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.addr }

// Cut closes every connection through the proxy and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop()
}

// Heal makes a cut proxy accept connections again on the same address. It panics if the port
// cannot be bound again (another process took it), which would invalidate the test anyway.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proxy.Enabled {
		return
	}
	if err := p.proxy.Start(); err != nil {
		panic(fmt.Sprintf("mysqltest: heal proxy on %s: %v", p.addr, err))
	}
}

// AddToxic adds a toxiproxy toxic: name is free, typ one of toxiproxy's types ("latency",
// "timeout", "reset_peer", "bandwidth", "slow_close", "limit_data", ...), stream "upstream" or
// "downstream", toxicity the probability in [0,1] that a connection is affected, attrs the
// type's attributes (e.g. {"latency": 200} in milliseconds).
// Returns an error for an unknown type or stream or a duplicate name.
func (p *Proxy) AddToxic(name, typ, stream string, toxicity float32, attrs map[string]any) error {
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": toxicity, "attributes": attrs,
	})
	if err != nil {
		return fmt.Errorf("mysqltest: toxic %s: %w", name, err)
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("mysqltest: add toxic %s: %w", name, err)
	}
	return nil
}

// RemoveToxic removes the named toxic. Returns an error if there is no such toxic.
func (p *Proxy) RemoveToxic(name string) error {
	if err := p.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		return fmt.Errorf("mysqltest: remove toxic %s: %w", name, err)
	}
	return nil
}
