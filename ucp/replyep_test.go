package ucp_test

import (
	"testing"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// The RDMO worker connects to each initiator by address (RQ_CREATE) and must
// recognise that initiator's requests by their reply endpoint. This pins down
// what UCX does: the reply endpoint of a message from a peer that b already
// connected to is b's own endpoint to that peer.
func TestReplyEndpointIsTheConnectedEndpoint(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		aAddr, err := p.a.Address()
		if err != nil {
			t.Fatal(err)
		}
		ba, err := p.b.Connect(aAddr, ucp.EndpointOptions{Name: "b->a"})
		if err != nil {
			t.Fatal(err)
		}
		ba.Value = "rq"
		var replies []*ucp.Endpoint
		p.b.SetHandler(1, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for _, m := range msgs {
				replies = append(replies, m.Reply)
			}
		}))
		for i := 0; i < 3; i++ {
			p.ab.SendAM(1, []byte{1}, nil, ucp.SendReply, nil, 0)
		}
		p.progress(func() bool { return len(replies) == 3 })
		for _, r := range replies {
			if r != ba {
				t.Logf("reply endpoint %p (%s), connected endpoint %p", r, r.Name(), ba)
				t.Errorf("reply endpoint is not the endpoint b connected to a")
			}
		}
		p.closeEndpointB(ba)
	})
}
