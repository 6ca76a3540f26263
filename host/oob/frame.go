package oob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/msgpackcheck"
)

// Wire constants. The layout of the first six bytes (magic, version) is
// frozen for every future version, so that any two versions can tell each
// other apart and report a VersionError instead of garbage.
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

// prefix is the decoded fixed part of a frame.
type prefix struct {
	magic   [4]byte
	version uint16
	typ     Type
	length  uint32
}

func (p *prefix) put(b []byte) {
	copy(b[0:4], p.magic[:])
	binary.BigEndian.PutUint16(b[4:6], p.version)
	binary.BigEndian.PutUint16(b[6:8], uint16(p.typ))
	binary.BigEndian.PutUint32(b[8:12], p.length)
}

func parsePrefix(b []byte) prefix {
	var p prefix
	copy(p.magic[:], b[0:4])
	p.version = binary.BigEndian.Uint16(b[4:6])
	p.typ = Type(binary.BigEndian.Uint16(b[6:8]))
	p.length = binary.BigEndian.Uint32(b[8:12])
	return p
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
		return nil, &OversizeError{Op: "send", Size: uint64(n), Limit: uint64(maxBody)}
	}
	p := prefix{version: version, typ: t, length: uint32(n)}
	copy(p.magic[:], Magic)
	p.put(b)
	return b, nil
}

// frame is one frame as read from the wire.
type frame struct {
	prefix
	body []byte
	raw  []byte // prefix and body, for the authentication transcript
}

// frameReader reads frames from r. got counts the bytes of the current
// frame read so far; onFirst, if set, runs once the first byte of a frame
// has arrived (the connection uses it to switch from the wait deadline to
// the per-frame deadline).
type frameReader struct {
	r       io.Reader
	version uint16
	maxBody uint32
	onFirst func()
	got     int
	want    int
}

// read reads one frame. It checks magic, version and length from the
// prefix before reading or allocating the body. I/O errors are returned
// unclassified with f.got and f.want set: see classifyIO.
func (f *frameReader) read() (*frame, error) {
	f.got, f.want = 0, PrefixLen
	var pb [PrefixLen]byte
	if err := f.readFull(pb[:]); err != nil {
		return nil, err
	}
	p := parsePrefix(pb[:])
	fr := &frame{prefix: p}
	if string(p.magic[:]) != Magic {
		return fr, &BadMagicError{Got: p.magic}
	}
	if p.version != f.version {
		return fr, &VersionError{Local: f.version, Peer: p.version}
	}
	if p.length > f.maxBody {
		return fr, &OversizeError{Op: "receive", Size: uint64(p.length), Limit: uint64(f.maxBody)}
	}
	f.want = PrefixLen + int(p.length)
	raw := make([]byte, f.want)
	copy(raw, pb[:])
	if err := f.readFull(raw[PrefixLen:]); err != nil {
		return nil, err
	}
	fr.raw = raw
	fr.body = raw[PrefixLen:]
	return fr, nil
}

func (f *frameReader) readFull(b []byte) error {
	for len(b) > 0 {
		n, err := f.r.Read(b)
		if n > 0 {
			if f.got == 0 && f.onFirst != nil {
				f.onFirst()
			}
			f.got += n
			b = b[n:]
		}
		if len(b) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// classifyIO turns an I/O error of a frame read into PeerGoneError or
// TruncatedError where it is one; other errors are returned unchanged.
func classifyIO(op string, err error, got, want int) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if got == 0 {
			return &PeerGoneError{Op: op, Err: io.EOF}
		}
		return &TruncatedError{Got: got, Want: want}
	}
	if isReset(err) {
		return &PeerGoneError{Op: op, Err: err}
	}
	return err
}

// decodeBody decodes the body of a frame of type t. Allocation is bounded
// by the body size: validateMsgpack checks every length claim against the
// bytes actually present before the msgpack decoder sees the body.
func decodeBody(t Type, body []byte) (Message, error) {
	rt, ok := registry[t]
	if !ok {
		return nil, &UnexpectedTypeError{Got: t}
	}
	if err := validateMsgpack(body); err != nil {
		return nil, &MalformedError{Type: t, Reason: err.Error()}
	}
	v := reflect.New(rt)
	if err := msgpack.Unmarshal(body, v.Interface()); err != nil {
		return nil, &MalformedError{Type: t, Reason: err.Error()}
	}
	return v.Elem().Interface().(Message), nil
}

// decodeFrame decodes one complete frame from b (which must hold exactly
// one frame) with the same checks as a connection. It is the unit the fuzz
// target exercises.
func decodeFrame(b []byte, maxBody uint32) (Message, error) {
	r := bytes.NewReader(b)
	fr := &frameReader{r: r, version: Version, maxBody: maxBody}
	f, err := fr.read()
	if err != nil {
		return nil, classifyIO("decode", err, fr.got, fr.want)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("oob: %d bytes after the frame", r.Len())
	}
	return decodeBody(f.typ, f.body)
}

// validateMsgpack checks that b is exactly one msgpack map the decoder can
// take without allocating more than the body's size suggests.
func validateMsgpack(b []byte) error { return msgpackcheck.Map(b, maxDepth) }
