// Package logsample limits how often a logger writes the same message and
// says, on the next line it writes, how many it left out.
package logsample

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// SuppressedKey is the field a line carries when lines of its message were
// left out since the last one written: how many.
const SuppressedKey = "suppressed"

// Sampled returns log writing, per message and level and per tick, the
// first `first` lines and every `thereafter`-th after that (zap's sampler
// policy), adding SuppressedKey to a line written after some were left out.
// Whoever floods the log (a peer with thousands of bad requests in flight)
// cannot flood it, and the reader still learns how much happened.
func Sampled(log *zap.Logger, tick time.Duration, first, thereafter int) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &core{Core: c, s: &state{tick: tick, first: first, thereafter: thereafter, counts: map[key]*count{}}}
	}))
}

type key struct {
	level zapcore.Level
	msg   string
}

type count struct {
	window     time.Time // start of the current tick
	n          int       // lines of the message in the current tick
	suppressed uint64    // left out since the last line written
}

type state struct {
	tick              time.Duration
	first, thereafter int
	mu                sync.Mutex
	counts            map[key]*count
}

type core struct {
	zapcore.Core
	s *state
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return &core{Core: c.Core.With(fields), s: c.s}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(e.Level) {
		return ce
	}
	return ce.AddCore(e, c)
}

// Write decides whether the line goes out.
func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	s := c.s
	k := key{e.Level, e.Message}
	s.mu.Lock()
	ct := s.counts[k]
	if ct == nil {
		if len(s.counts) > 4096 { // bounded: messages are few, but be safe
			clear(s.counts)
		}
		ct = &count{}
		s.counts[k] = ct
	}
	if e.Time.Sub(ct.window) >= s.tick || e.Time.Before(ct.window) {
		ct.window, ct.n = e.Time, 0
	}
	ct.n++
	keep := ct.n <= s.first || (s.thereafter > 0 && (ct.n-s.first)%s.thereafter == 0)
	var suppressed uint64
	if keep {
		suppressed, ct.suppressed = ct.suppressed, 0
	} else {
		ct.suppressed++
	}
	s.mu.Unlock()
	if !keep {
		return nil
	}
	if suppressed > 0 {
		fields = append(fields[:len(fields):len(fields)], zap.Uint64(SuppressedKey, suppressed))
	}
	return c.Core.Write(e, fields)
}
