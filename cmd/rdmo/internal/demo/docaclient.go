package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/oob"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// runReference is -m client --oob-protocol doca: the reference demo
// against a reference server (DOCA 3.0's urom_rdmo, or rdmo's, which
// detects the exchange), as the reference client runs it
// (docs/PROTOCOL.md, "The reference out-of-band exchange"): client id 0,
// an endpoint without error handling, an 8-byte append and a flush, the
// barrier, 16 scattered 8-byte chunks over base..base+127 and a flush.
// The reference exchange has no verdict: the server checks its memory and
// says nothing, so success here means both flushes were answered, with no
// failure reported (a reference worker reports none: its answers are 12
// bytes; ours carry the failures since the previous flush).
func (c *client) runReference(ctx context.Context, devCfg map[string]string) error {
	addr := net.JoinHostPort(c.cfg.ServerName, strconv.Itoa(int(c.cfg.OOBPort)))
	rc, err := c.dialReference(ctx, addr)
	if err != nil {
		return err
	}
	c.ref = rc
	c.log.Info("connected to the server (reference out-of-band exchange)", zap.Stringer("server", rc.RemoteAddr()))

	step := func(what string, timeout time.Duration, msg []byte) ([]byte, error) {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		m, err := rc.Exchange(sctx, msg)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("reference exchange %s: %w", what, err)
		}
		return m, nil
	}
	in, err := initiator.New(initiator.Options{
		// Exchange 1: this initiator's address for the RDMO worker's.
		Exchange: func(own []byte) ([]byte, error) {
			return step("1 (worker addresses)", workerInfoTimeout, own)
		},
		ClientID: 0, // the reference client's; rdmo's server binds it to its client
		UCX:      devCfg,
		Logger:   c.log.Named("initiator"),
		// A reference worker answers FLUSH only, with no in-flight limit.
		Credits: -1,
		// As the reference client: UCX refuses endpoints whose two ends
		// differ, and a reference worker asks for none.
		ErrorHandling: ucp.ErrorHandlingNone,
	})
	if err != nil {
		return fmt.Errorf("connecting to the RDMO worker: %w", err)
	}
	c.in = in
	c.log.Info("received the RDMO worker's address")

	// Exchange 2: the queue's region id and the address of its tail word.
	info, err := step("2 (region id and tail address)", workerInfoTimeout, nil)
	if err != nil {
		return err
	}
	if len(info) != 16 {
		return fmt.Errorf("reference exchange 2: the server sent %d bytes, want 16 (region id, tail address)", len(info))
	}
	region, base := binary.LittleEndian.Uint64(info[0:]), binary.LittleEndian.Uint64(info[8:])
	c.log.Info("received the queue", zap.Uint64("region", region), zap.String("tail", fmt.Sprintf("%#x", base)))
	start := time.Now()

	s := c.in.With(ctx, 0)
	data := bytes.Repeat([]byte{refByte}, refAppendLen)
	if _, err := s.Append(base, region, region, data); err != nil {
		return fmt.Errorf("reference append: %w", err)
	}
	if err := c.flushSync(ctx); err != nil {
		return fmt.Errorf("reference demo, the append's flush: %w", err)
	}
	fmt.Fprintf(Stdout, "rdmo client: append of 8 bytes of 0x33 done and flushed\n")

	// Exchange 3: the barrier; the server checked the append meanwhile.
	if _, err := step("3 (barrier)", barrierTimeout, nil); err != nil {
		return err
	}

	iovs := make([]wire.IOV, refScatterBytes/8)
	chunks := make([][]byte, len(iovs))
	for i := range iovs {
		iovs[i] = wire.IOV{Addr: base + uint64(8*i), Rkey: rdmo.RegionID(region), Len: 8}
		chunks[i] = data
	}
	if _, err := s.Scatter(iovs, chunks); err != nil {
		return fmt.Errorf("reference scatter: %w", err)
	}
	if err := c.flushSync(ctx); err != nil {
		return fmt.Errorf("reference demo, the scatter's flush: %w", err)
	}
	fmt.Fprintf(Stdout, "rdmo client: scatter of 16 chunks of 8 bytes done and flushed\n")
	elapsed := time.Since(start)

	c.mu.Lock()
	errs := c.failures + c.flushErrs
	c.mu.Unlock()
	c.printRefSummary(rc, elapsed, errs)
	if errs > 0 {
		return fmt.Errorf("the worker reports %d failed request(s) of the reference demo", errs)
	}
	return nil
}

// dialReference connects, retrying while nobody listens yet.
func (c *client) dialReference(ctx context.Context, addr string) (*oob.RefConn, error) {
	deadline := time.Now().Add(dialRetryFor)
	logged := false
	for {
		dctx, cancel := context.WithTimeout(ctx, oob.DefaultTimeout)
		rc, err := oob.DialReference(dctx, addr, oob.Options{Logger: c.log.Named("oob")})
		cancel()
		if err == nil {
			return rc, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return nil, fmt.Errorf("-s/--server-name %q: no such host", c.cfg.ServerName)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return nil, fmt.Errorf("cannot reach the server at %s: %w", addr, err)
		}
		if !logged {
			c.log.Info("waiting for the server to listen; retrying", zap.String("addr", addr), zap.Duration("for", dialRetryFor))
			logged = true
		}
		select {
		case <-time.After(dialRetryInterval):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *client) printRefSummary(rc *oob.RefConn, elapsed time.Duration, errs uint64) {
	out := Stdout
	c.mu.Lock()
	lat := append([]time.Duration(nil), c.flushLat...)
	c.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Fprintf(out, "rdmo client: reference demo done (DOCA out-of-band exchange; the server checks its memory and does not answer)\n")
	fmt.Fprintf(out, "  server        %s\n", rc.RemoteAddr())
	fmt.Fprintf(out, "  demo          8-byte append, flush, barrier, 16 × 8-byte scatter over base..base+127, flush: %s\n", elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "  flushes       %d, latency p50 %v, p99 %v\n", len(lat), roundLat(percentile(lat, 50)), roundLat(percentile(lat, 99)))
	st := c.in.Stats()
	fmt.Fprintf(out, "  requests      %d appends, %d scatters, %d flushes\n", st.Appends, st.Scatters, st.Flushes)
	fmt.Fprintf(out, "  errors        %d\n", errs)
}
