// Package channel is the framing rdmo's two authenticated control channels
// share, the UROM command channel (urom) and the out-of-band channel
// (host/oob): a fixed prefix (magic, version, an optional message type,
// body length) checked before the body is read or allocated, a msgpack
// body whose counts are checked against its bytes before it is decoded
// (internal/msgpackcheck), and one typed error, *Error, whose Kind says
// what failed and whether it failed before the peer authenticated. The
// mutual HMAC challenge both run is internal/hmacauth.
package channel

import (
	"encoding/binary"
	"errors"
	"io"
	"syscall"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/msgpackcheck"
)

// Format is one protocol's frame prefix: Magic (four bytes), Version (u16
// big endian), a u16 message type if Typed, the body length (u32 big
// endian). Magic and version keep their offsets in every version of a
// protocol, so peers of different versions can tell each other apart.
type Format struct {
	Proto   string // names the protocol in errors: "urom", "oob"
	Magic   string
	Version uint16
	Typed   bool
}

// PrefixLen is the size of the fixed prefix: 10 bytes, 12 if Typed.
func (f Format) PrefixLen() int {
	if f.Typed {
		return 12
	}
	return 10
}

// Prefix is the decoded fixed part of a frame.
type Prefix struct {
	Magic   [4]byte
	Version uint16
	Type    uint16 // 0 unless the format is Typed
	Length  uint32
}

// PutPrefix writes the prefix of a frame of type typ (ignored unless
// Typed) with an n-byte body into b[:f.PrefixLen()].
func (f Format) PutPrefix(b []byte, typ uint16, n int) {
	copy(b[0:4], f.Magic)
	binary.BigEndian.PutUint16(b[4:6], f.Version)
	at := 6
	if f.Typed {
		binary.BigEndian.PutUint16(b[6:8], typ)
		at = 8
	}
	binary.BigEndian.PutUint32(b[at:at+4], uint32(n))
}

func (f Format) parse(b []byte) Prefix {
	var p Prefix
	copy(p.Magic[:], b[0:4])
	p.Version = binary.BigEndian.Uint16(b[4:6])
	at := 6
	if f.Typed {
		p.Type = binary.BigEndian.Uint16(b[6:8])
		at = 8
	}
	p.Length = binary.BigEndian.Uint32(b[at : at+4])
	return p
}

// Frame is one frame as read.
type Frame struct {
	Prefix
	Raw  []byte // prefix and body, as an authentication transcript covers them
	Body []byte
}

// Reader reads frames of one Format from R. Got counts the bytes of the
// current frame read so far and Want the bytes it needs (prefix, then
// prefix and body), for an error that says where the stream broke;
// OnFirst, if set, runs once the first byte of a frame has arrived (a
// connection uses it to switch from the wait deadline to the per-frame
// deadline).
type Reader struct {
	R       io.Reader
	Format  Format
	OnFirst func()
	Got     int
	Want    int
}

// Read reads one frame with a body of at most limit bytes. It checks
// magic, version and length from the prefix before it reads or allocates
// the body: those failures are an *Error (KindBadMagic, KindVersion,
// KindOversize) with the frame's prefix returned. An I/O error is returned
// as it is, with Got and Want set (see IOError).
func (r *Reader) Read(limit uint32) (*Frame, error) {
	n := r.Format.PrefixLen()
	r.Got, r.Want = 0, n
	var pb [12]byte
	if err := r.readFull(pb[:n]); err != nil {
		return nil, err
	}
	p := r.Format.parse(pb[:n])
	fr := &Frame{Prefix: p}
	f := r.Format
	switch {
	case string(p.Magic[:]) != f.Magic:
		return fr, &Error{Proto: f.Proto, Kind: KindBadMagic, Op: "receive", Magic: p.Magic}
	case p.Version != f.Version:
		return fr, &Error{Proto: f.Proto, Kind: KindVersion, Op: "receive", Local: f.Version, Peer: p.Version}
	case p.Length > limit:
		return fr, &Error{Proto: f.Proto, Kind: KindOversize, Op: "receive", Size: uint64(p.Length), Limit: uint64(limit)}
	}
	r.Want = n + int(p.Length)
	raw := make([]byte, r.Want)
	copy(raw, pb[:n])
	if err := r.readFull(raw[n:]); err != nil {
		return nil, err
	}
	fr.Raw = raw
	fr.Body = raw[n:]
	return fr, nil
}

func (r *Reader) readFull(b []byte) error {
	for len(b) > 0 {
		n, err := r.R.Read(b)
		if n > 0 {
			if r.Got == 0 && r.OnFirst != nil {
				r.OnFirst()
			}
			r.Got += n
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

// IOError classifies an I/O error of a frame read that had Got of Want
// bytes: the peer closing at a frame boundary or resetting the connection
// is KindPeerGone, closing mid-frame KindTruncated; any other error is
// returned unchanged.
func (f Format) IOError(op string, err error, got, want int) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if got == 0 {
			return &Error{Proto: f.Proto, Kind: KindPeerGone, Op: op, Err: io.EOF}
		}
		return &Error{Proto: f.Proto, Kind: KindTruncated, Op: op, Got: got, Want: want, Err: err}
	}
	if IsReset(err) {
		return &Error{Proto: f.Proto, Kind: KindPeerGone, Op: op, Err: err}
	}
	return err
}

// IsReset reports whether err means the peer reset or abandoned the
// connection.
func IsReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// Decode decodes body, exactly one msgpack value whose containers nest at
// most maxDepth deep, into v. Every count in it is checked against the
// bytes present first, so decoding allocates at most a small multiple of
// the body's size. A failure is an *Error of KindMalformed.
func (f Format) Decode(body []byte, maxDepth int, v any) error {
	return f.decode(body, v, msgpackcheck.Value(body, maxDepth))
}

// DecodeMap is Decode for a body that must be one msgpack map.
func (f Format) DecodeMap(body []byte, maxDepth int, v any) error {
	return f.decode(body, v, msgpackcheck.Map(body, maxDepth))
}

func (f Format) decode(body []byte, v any, checked error) error {
	if checked != nil {
		return &Error{Proto: f.Proto, Kind: KindMalformed, Op: "decode", Detail: checked.Error()}
	}
	if err := msgpack.Unmarshal(body, v); err != nil {
		return &Error{Proto: f.Proto, Kind: KindMalformed, Op: "decode", Detail: err.Error()}
	}
	return nil
}
