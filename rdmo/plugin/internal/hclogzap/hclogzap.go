// Package hclogzap adapts zap to hclog.Logger, the logger interface of
// go-plugin, for both ends of a plugin connection: the worker's go-plugin
// client and the plugin process's go-plugin server log through it.
package hclogzap

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New adapts a zap logger to hclog.Logger, the logger interface of
// go-plugin. Lines go to z at the matching zap level: Trace and Debug to
// Debug, Info to Info, Warn to Warn, Error to Error; the key/value pairs
// become zap fields (hclog's "@module" and "@caller" of a plugin line become
// "plugin_module" and "plugin_caller"). GetLevel reports the lowest level z
// keeps, so go-plugin skips parsing plugin lines z would drop.
func New(z *zap.Logger) hclog.Logger {
	if z == nil {
		z = zap.NewNop()
	}
	lv := new(atomic.Int32)
	lv.Store(int32(hclog.NoLevel))
	// Callers are go-plugin's: skip Trace..Error/Log and log.
	z = z.WithOptions(zap.AddCallerSkip(2))
	return &hcLogger{root: z, z: z, level: lv}
}

type hcLogger struct {
	root    *zap.Logger // without name or implied args, for ResetNamed
	z       *zap.Logger
	name    string
	implied []any
	level   *atomic.Int32 // SetLevel override (hclog.NoLevel: none), shared with children
}

var _ hclog.Logger = (*hcLogger)(nil)

func toZapLevel(l hclog.Level) zapcore.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return zapcore.DebugLevel
	case hclog.Warn:
		return zapcore.WarnLevel
	case hclog.Error:
		return zapcore.ErrorLevel
	}
	return zapcore.InfoLevel // Info, NoLevel, DefaultLevel
}

func (l *hcLogger) enabled(level hclog.Level) bool {
	if level == hclog.Off {
		return false
	}
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if o := hclog.Level(l.level.Load()); o != hclog.NoLevel && level < o {
		return false
	}
	return l.z.Core().Enabled(toZapLevel(level))
}

func (l *hcLogger) Log(level hclog.Level, msg string, args ...any) { l.log(level, msg, args) }

func (l *hcLogger) log(level hclog.Level, msg string, args []any) {
	if !l.enabled(level) {
		return
	}
	if ce := l.z.Check(toZapLevel(level), msg); ce != nil {
		ce.Write(zapFields(args)...)
	}
}

// zapFields turns hclog's alternating keys and values into zap fields.
func zapFields(args []any) []zap.Field {
	if len(args) == 0 {
		return nil
	}
	fs := make([]zap.Field, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			fs = append(fs, zap.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		var key string
		switch k := args[i].(type) {
		case string:
			key = k
		default:
			key = fmt.Sprint(k)
		}
		if strings.HasPrefix(key, "@") {
			key = "plugin_" + key[1:]
		}
		switch v := args[i+1].(type) {
		case hclog.Format:
			if len(v) > 0 {
				fs = append(fs, zap.String(key, fmt.Sprintf(fmt.Sprint(v[0]), v[1:]...)))
				continue
			}
		case error:
			fs = append(fs, zap.NamedError(key, v))
			continue
		}
		fs = append(fs, zap.Any(key, args[i+1]))
	}
	return fs
}

func (l *hcLogger) Trace(msg string, args ...any) { l.log(hclog.Trace, msg, args) }
func (l *hcLogger) Debug(msg string, args ...any) { l.log(hclog.Debug, msg, args) }
func (l *hcLogger) Info(msg string, args ...any)  { l.log(hclog.Info, msg, args) }
func (l *hcLogger) Warn(msg string, args ...any)  { l.log(hclog.Warn, msg, args) }
func (l *hcLogger) Error(msg string, args ...any) { l.log(hclog.Error, msg, args) }

func (l *hcLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hcLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hcLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hcLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hcLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *hcLogger) ImpliedArgs() []any { return append([]any(nil), l.implied...) }

func (l *hcLogger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	c.z = l.z.With(zapFields(args)...)
	return &c
}

func (l *hcLogger) Name() string { return l.name }

func (l *hcLogger) Named(name string) hclog.Logger {
	c := *l
	if l.name != "" {
		c.name = l.name + "." + name
	} else {
		c.name = name
	}
	c.z = l.z.Named(name)
	return &c
}

func (l *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	c.z = l.root.Named(name).With(zapFields(l.implied)...)
	return &c
}

func (l *hcLogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }

func (l *hcLogger) GetLevel() hclog.Level {
	if o := hclog.Level(l.level.Load()); o != hclog.NoLevel {
		return o
	}
	core := l.z.Core()
	switch {
	case core.Enabled(zapcore.DebugLevel):
		return hclog.Trace // trace lines are kept, as zap Debug
	case core.Enabled(zapcore.InfoLevel):
		return hclog.Info
	case core.Enabled(zapcore.WarnLevel):
		return hclog.Warn
	case core.Enabled(zapcore.ErrorLevel):
		return hclog.Error
	}
	return hclog.Off
}

func (l *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &lineWriter{l: l, infer: opts.InferLevels || opts.InferLevelsWithTimestamp, force: opts.ForceLevel}
}

// lineWriter logs each line written to it, at a level taken from a
// "[WARN]"-style prefix when infer is set, else force (Info if unset).
type lineWriter struct {
	l     *hcLogger
	infer bool
	force hclog.Level
	mu    sync.Mutex
	buf   []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) == 0 {
		w.buf = nil
	}
	return len(p), nil
}

func (w *lineWriter) line(s string) {
	s = strings.TrimRight(s, "\r")
	if s == "" {
		return
	}
	level := w.force
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if w.infer {
		for _, p := range []struct {
			prefix string
			level  hclog.Level
		}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error}} {
			if j := strings.Index(s, p.prefix); j >= 0 {
				level = p.level
				s = strings.TrimSpace(s[j+len(p.prefix):])
				break
			}
		}
	}
	w.l.Log(level, s)
}
