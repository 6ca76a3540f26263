package uromwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/channel"
)

// pipeConn gives read() a connection whose peer writes b then closes.
func readFrom(t testing.TB, b []byte) (*Envelope, error) {
	a, c := net.Pipe()
	go func() {
		c.Write(b)
		c.Close()
	}()
	defer a.Close()
	return NewConn(a, time.Second).Read(time.Second)
}

func frame(body []byte, version uint16) []byte {
	b := []byte(FrameMagic)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

func TestFrameErrors(t *testing.T) {
	if _, err := readFrom(t, frame([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, ProtocolVersion)); err == nil {
		t.Error("hostile array count accepted")
	}
	var ve *channel.Error
	if _, err := readFrom(t, frame([]byte{0x80}, 9)); !errors.Is(err, ErrVersion) || !errors.As(err, &ve) || ve.Peer != 9 {
		t.Errorf("version: %v", err)
	}
	if _, err := readFrom(t, append([]byte("HTTP"), make([]byte, 20)...)); !errors.Is(err, ErrBadMagic) {
		t.Errorf("bad magic: %v", err)
	}
	big := frame(nil, ProtocolVersion)
	binary.BigEndian.PutUint32(big[6:], MaxFrame+1)
	if _, err := readFrom(t, big); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversize: %v", err)
	}
	if _, err := readFrom(t, frame([]byte{0x81, 0xa1, 'c'}, ProtocolVersion)[:12]); err == nil {
		t.Error("truncated frame accepted")
	}
}

func FuzzReadFrame(f *testing.F) {
	var good bytes.Buffer
	a, c := net.Pipe()
	go func() {
		NewConn(c, time.Second).Write(&Envelope{Cookie: 7, Kind: KindSpawn, Body: []byte{0x80}})
		c.Close()
	}()
	buf := make([]byte, 256)
	n, _ := a.Read(buf)
	good.Write(buf[:n])
	a.Close()
	f.Add(good.Bytes())
	f.Add(frame([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, ProtocolVersion))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := readFrom(t, b)
		if err == nil && env == nil {
			t.Fatal("nil envelope without error")
		}
	})
}
