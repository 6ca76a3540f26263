package oob

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder: it must never
// panic, must fail with one of the package's errors, and whatever it
// accepts must survive a re-encode and decode unchanged.
func FuzzDecodeFrame(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(frameBytes(f, Version, m))
	}
	for _, m := range []Message{Hello{Role: RoleTarget, Version: Version, Auth: true},
		authChallenge{Nonce: bytes.Repeat([]byte{1}, NonceLen)}, authProof{MAC: make([]byte, 32)}} {
		f.Add(frameBytes(f, Version, m))
	}
	good := frameBytes(f, Version, Barrier{ID: 7})
	f.Add(good[:5])                                                                             // truncated prefix
	f.Add(good[:len(good)-1])                                                                   // truncated body
	f.Add(append(append([]byte{}, good...), 0))                                                 // trailing byte
	f.Add(frameBytes(f, 2, Barrier{ID: 7}))                                                     // other version
	f.Add(append([]byte("XDOB"), good[4:]...))                                                  // bad magic
	f.Add(prefixBytes(Magic, Version, TypeWorkerInfo, 0xFFFFFFFF))                              // oversize
	f.Add(append(prefixBytes(Magic, Version, 999, 1), 0x80))                                    // unknown type
	f.Add(append(prefixBytes(Magic, Version, TypeWorkerInfo, 5), 0xdd, 0xff, 0xff, 0xff, 0xff)) // not a map
	f.Add(append(prefixBytes(Magic, Version, TypeWorkerInfo, 14),
		0x81, 0xa7, 'r', 'e', 'g', 'i', 'o', 'n', 's', 0xdd, 0xff, 0xff, 0xff, 0xff)) // hostile count
	f.Add(append(prefixBytes(Magic, Version, TypeBarrier, 4), 0x81, 0xa1, 'x', 0xd4)) // ext type
	f.Add([]byte{})

	sentinels := []error{ErrPeerGone, ErrTruncated, ErrBadMagic, ErrVersion, ErrOversize,
		ErrUnexpected, ErrMalformed}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := decodeFrame(data, DefaultMaxBody)
		if err != nil {
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n > 1 || (n == 0 && !bytes.Contains([]byte(err.Error()), []byte("bytes after the frame"))) {
				t.Fatalf("error %v (%T) matches %d sentinels", err, err, n)
			}
			return
		}
		b, err := encodeFrame(Version, msg, DefaultMaxBody)
		if err != nil {
			t.Fatalf("re-encoding %#v: %v", msg, err)
		}
		again, err := decodeFrame(b, DefaultMaxBody)
		if err != nil {
			t.Fatalf("decoding the re-encoding of %#v: %v", msg, err)
		}
		if !reflect.DeepEqual(msg, again) {
			t.Fatalf("round trip changed %#v into %#v", msg, again)
		}
	})
}
