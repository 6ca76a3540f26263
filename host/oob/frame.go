package oob

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/channel"
)

// Wire constants. The layout of the first six bytes (magic, version) is
// frozen for every future version, so that any two versions can tell each
// other apart and report a version mismatch (ErrVersion) instead of
// garbage.
const (
	// Magic opens every frame.
	Magic = "RDOB"
	// Version is the protocol version this package speaks.
	Version uint16 = 1
	// PrefixLen is the size of the fixed frame prefix.
	PrefixLen = 12
	// DefaultMaxBody is the default limit on a frame body (Options.MaxBody).
	DefaultMaxBody = 64 << 10
	// MaxBodyLimit is the largest Options.MaxBody accepted.
	MaxBodyLimit = 16 << 20
	// maxDepth bounds the nesting of msgpack containers in a body. This
	// version needs 3 (map → array → map); the slack is for additions.
	maxDepth = 16
)

// format is the frame prefix of a version of this protocol (internal/channel).
func format(version uint16) channel.Format {
	return channel.Format{Proto: protoName, Magic: Magic, Version: version, Typed: true}
}

// encodeFrame returns the whole frame (prefix and msgpack body) of msg.
func encodeFrame(version uint16, msg Message, maxBody int) ([]byte, error) {
	if msg == nil {
		return nil, errors.New("oob: send: nil message")
	}
	if reflect.ValueOf(msg).Kind() == reflect.Pointer && reflect.ValueOf(msg).IsNil() {
		return nil, errors.New("oob: send: nil message")
	}
	t := msg.MessageType()
	want, ok := registry[t]
	if !ok {
		return nil, fmt.Errorf("oob: send: message type %d (%T) is not registered", uint16(t), msg)
	}
	if got := reflect.Indirect(reflect.ValueOf(msg)).Type(); got != want {
		return nil, fmt.Errorf("oob: send: %T claims type %v, registered to %v", msg, t, want)
	}
	var buf bytes.Buffer
	buf.Grow(PrefixLen + 64)
	buf.Write(make([]byte, PrefixLen))
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(msg); err != nil {
		return nil, fmt.Errorf("oob: send: encoding %v: %w", t, err)
	}
	b := buf.Bytes()
	n := len(b) - PrefixLen
	if n > maxBody {
		return nil, &ConnError{Proto: protoName, Kind: channel.KindOversize, Op: "send", Size: uint64(n), Limit: uint64(maxBody)}
	}
	format(version).PutPrefix(b, uint16(t), n)
	return b, nil
}

// frameType is a frame's message type.
func frameType(f *channel.Frame) Type { return Type(f.Type) }

// decodeBody decodes the body of a frame of type t. Allocation is bounded
// by the body size: every length claim is checked against the bytes
// actually present before the msgpack decoder sees the body.
func decodeBody(t Type, body []byte) (Message, error) {
	rt, ok := registry[t]
	if !ok {
		return nil, errUnexpected(t, 0)
	}
	v := reflect.New(rt)
	if err := format(Version).DecodeMap(body, maxDepth, v.Interface()); err != nil {
		var ce *ConnError
		if errors.As(err, &ce) {
			return nil, errMalformed(t, ce.Detail)
		}
		return nil, err
	}
	return v.Elem().Interface().(Message), nil
}

// decodeFrame decodes one complete frame from b (which must hold exactly
// one frame) with the same checks as a connection. It is the unit the fuzz
// target exercises.
func decodeFrame(b []byte, maxBody uint32) (Message, error) {
	r := bytes.NewReader(b)
	fr := &channel.Reader{R: r, Format: format(Version)}
	f, err := fr.Read(maxBody)
	if err != nil {
		return nil, fr.Format.IOError("decode", err, fr.Got, fr.Want)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("oob: %d bytes after the frame", r.Len())
	}
	return decodeBody(frameType(f), f.Body)
}
