package plugin

import (
	"sync"
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
