package plugin

import (
	"context"
	"time"
)

// MaxMsgSize exports maxMsgSize to the external tests.
const MaxMsgSize = maxMsgSize

// Backoff is the delay the last restart waited (0 after a successful call).
func (h *Handler) Backoff() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.backoff
}

// LibCodec names the codec of the maintained MessagePack library.
const (
	HandCodec = codecName
	LibCodec  = libCodecName
)

// LoadCodec is Load with every call carried by the named codec.
func LoadCodec(ctx context.Context, path string, opts LoadOptions, codec string) (*Handler, error) {
	return load(ctx, path, opts, codec)
}
