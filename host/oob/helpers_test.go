package oob

import (
	"context"
	"net"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/openrdmo/rdmo/internal/channel"
)

// checkLeaks fails the test if goroutines started during it are still
// alive when it ends (its cleanups included: register it first). It compares
// runtime goroutine dumps taken before and after, like goleak. A goroutine
// that has just signalled its end may still be returning, so the check
// yields (and only after many yields waits a millisecond) up to 5 s before
// reporting.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := goroutines()
	t.Cleanup(func() {
		var extra []string
		deadline := time.Now().Add(5 * time.Second)
		for i := 0; ; i++ {
			extra = extra[:0]
			for id, stack := range goroutines() {
				if _, ok := before[id]; !ok {
					extra = append(extra, stack)
				}
			}
			if len(extra) == 0 {
				return
			}
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
			if i > 100 {
				time.Sleep(time.Millisecond)
			}
		}
		sort.Strings(extra)
		t.Errorf("%d goroutine(s) leaked:\n\n%s", len(extra), strings.Join(extra, "\n\n"))
	})
}

// goroutines returns the stack of every goroutine but the caller's, by id.
func goroutines() map[int]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int]string{}
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // the calling goroutine
		}
		head, _, _ := strings.Cut(g, " [")
		id, err := strconv.Atoi(strings.TrimPrefix(head, "goroutine "))
		if err != nil {
			continue
		}
		out[id] = g
	}
	return out
}

func testOptions(t *testing.T) Options {
	return Options{Timeout: 5 * time.Second, Logger: zaptest.NewLogger(t)}
}

var (
	secretA = []byte("0123456789abcdef0123456789abcdef")
	secretB = []byte("fedcba9876543210fedcba9876543210")
)

type acceptResult struct {
	c   *Conn
	err error
}

// listen starts a listener on a random loopback port, closed at cleanup.
func listen(t *testing.T, opts Options) *Listener {
	t.Helper()
	l, err := Listen("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acceptAsync runs one Accept in a goroutine; the connection, if any, is
// closed at cleanup.
func acceptAsync(t *testing.T, ctx context.Context, l *Listener) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- acceptResult{c, err}
	}()
	return ch
}

func closeLater(t *testing.T, c *Conn) {
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
}

// pair returns a connected (server, client) pair over loopback.
func pair(t *testing.T, lopts, dopts Options) (*Conn, *Conn) {
	t.Helper()
	l := listen(t, lopts)
	ctx := context.Background()
	ch := acceptAsync(t, ctx, l)
	cc, derr := Dial(ctx, l.Addr().String(), dopts)
	r := <-ch
	closeLater(t, cc)
	closeLater(t, r.c)
	if derr != nil || r.err != nil {
		t.Fatalf("dial: %v; accept: %v", derr, r.err)
	}
	return r.c, cc
}

// rawDial connects a plain TCP socket, closed at cleanup.
func rawDial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc.(*net.TCPConn)
}

// frameBytes encodes msg as a frame of the given version.
func frameBytes(t testing.TB, version uint16, msg Message) []byte {
	t.Helper()
	b, err := encodeFrame(version, msg, MaxBodyLimit)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawHello plays the hello step by hand: sends h, returns the peer's hello.
func rawHello(t *testing.T, nc net.Conn, h Hello) Hello {
	t.Helper()
	if h.Version == 0 {
		h.Version = Version
	}
	if _, err := nc.Write(frameBytes(t, h.Version, h)); err != nil {
		t.Fatal(err)
	}
	f := rawRead(t, nc)
	m, err := decodeBody(frameType(f), f.Body)
	if err != nil {
		t.Fatal(err)
	}
	return m.(Hello)
}

func rawRead(t *testing.T, nc net.Conn) *channel.Frame {
	t.Helper()
	fr := channel.Reader{R: nc, Format: format(Version)}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := fr.Read(MaxBodyLimit)
	if err != nil {
		t.Fatalf("raw read: %v", err)
	}
	return f
}

// rawReadAll reads frames until the peer closes, returning their types.
func rawReadAll(nc net.Conn) []Type {
	fr := channel.Reader{R: nc, Format: format(Version)}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var types []Type
	for {
		f, err := fr.Read(MaxBodyLimit)
		if err != nil {
			return types
		}
		types = append(types, frameType(f))
	}
}

// prefixBytes builds a raw prefix.
func prefixBytes(magic string, version uint16, t Type, length uint32) []byte {
	f := format(version)
	f.Magic = magic
	b := make([]byte, PrefixLen)
	f.PutPrefix(b, uint16(t), int(length))
	return b
}

// notBefore checks that a wait lasted at least its limit (a clock that
// only moves forward makes this exact). How much longer it took is not
// asserted: a loaded machine makes anything late; which limit ended the
// wait is checked through the error it returned.
func notBefore(t *testing.T, elapsed, limit time.Duration) {
	t.Helper()
	if elapsed < limit {
		t.Errorf("took %v, want at least %v", elapsed, limit)
	}
}

func mustContain(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("nil error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}
