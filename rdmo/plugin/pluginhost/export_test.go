package pluginhost

import (
	"context"
	"sync"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wire"
)

// MaxMsgSize exports the message bound to the external tests.
const MaxMsgSize = wire.MaxMsgSize

// OpNames checks a plugin's declared op names (opNames): each pair is an
// op and its name.
func OpNames(info rdmo.HandlerInfo, pairs ...any) (map[uint32]string, error) {
	var names []wire.OpName
	for i := 0; i+1 < len(pairs); i += 2 {
		names = append(names, wire.OpName{Op: pairs[i].(uint32), Name: pairs[i+1].(string)})
	}
	return opNames(info, names)
}

// Backoff is the delay the last restart waited (0 after a successful call).
func (h *Handler) Backoff() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.backoff
}

// HandCodec and LibCodec name the hand-written codec and the one of the
// maintained MessagePack library.
const (
	HandCodec = wire.CodecName
	LibCodec  = wire.LibCodecName
)

// LoadCodec is Load with every call carried by the named codec.
func LoadCodec(ctx context.Context, path string, opts LoadOptions, codec string) (*Handler, error) {
	return load(ctx, path, opts, codec)
}

// HoldRestarts keeps h down after its plugin dies, whatever the backoff,
// until release is called (or h is closed).
func (h *Handler) HoldRestarts() (release func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.restartGate = gate
	h.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}
