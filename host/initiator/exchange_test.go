package initiator_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// Options.Exchange: the Initiator hands its own address out first and
// connects to the address it gets back (the reference's out-of-band
// order); a failed exchange fails New and leaks nothing.
func TestExchange(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s := newStandIn(t, tr, standInConfig{})
		var own []byte
		in, err := initiator.New(initiator.Options{
			ClientID: testClient,
			UCX:      tr.Config(),
			Exchange: func(a []byte) ([]byte, error) {
				own = append([]byte(nil), a...)
				return s.addr, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		if len(own) == 0 || !bytes.Equal(own, in.Address()) {
			t.Errorf("Exchange got %d bytes, not the Initiator's address", len(own))
		}
		if err := in.Append(8, 1, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(timeout(t, 20*time.Second)); err != nil {
			t.Fatal(err)
		}

		boom := errors.New("boom")
		for _, ex := range []func([]byte) ([]byte, error){
			func([]byte) ([]byte, error) { return nil, boom },
			func([]byte) ([]byte, error) { return nil, nil },
		} {
			if _, err := initiator.New(initiator.Options{UCX: tr.Config(), Exchange: ex}); err == nil {
				t.Error("New with a failed exchange succeeded")
			}
		}
	})
}
