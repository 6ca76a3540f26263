package plugin

import "time"

// MaxMsgSize exports maxMsgSize to the external tests.
const MaxMsgSize = maxMsgSize

// Backoff is the delay the last restart waited (0 after a successful call).
func (h *Handler) Backoff() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.backoff
}
