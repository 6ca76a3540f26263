package hmacauth

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// The proof's bytes are a wire format (host/oob version 1 peers compute
// it): this vector was computed by host/oob's own proof before it moved
// here, and must never change.
func TestProofVector(t *testing.T) {
	tr := Transcript{
		Label:       "rdmo-oob v1 auth proof",
		DialerHello: []byte("hello-dialer"), ListenerHello: []byte("hello-listener!"),
		DialerNonce: []byte("nonce-d-0123456789abcdef01234567"), ListenerNonce: []byte("nonce-l-0123456789abcdef01234567"),
	}
	secret := []byte("secret-0123456789")
	for _, tc := range []struct {
		who  []byte
		want string
	}{
		{[]byte{Dialer, 2}, "0806194b2c2fe2ed50cd88231b3b2e057951917ea6da4354af145e88138495bc"},
		{[]byte{Listener, 1}, "32d3b469d5498232749d71fdcbe3c78af9efef4fadea3b263a2d10b328ed2fa9"},
	} {
		if got := hex.EncodeToString(tr.Proof(secret, tc.who...)); got != tc.want {
			t.Errorf("proof of %q = %s, want %s", tc.who, got, tc.want)
		}
	}
}

// Every input changes the proof: the sides, the label, the secret, each
// hello and nonce, and where one hello ends and the other starts.
func TestProofBindsEverything(t *testing.T) {
	base := Transcript{Label: "l", DialerHello: []byte("ab"), ListenerHello: []byte("c"),
		DialerNonce: bytes.Repeat([]byte{1}, NonceLen), ListenerNonce: bytes.Repeat([]byte{2}, NonceLen)}
	secret := []byte("0123456789abcdef")
	ref := base.Proof(secret, Dialer)
	if !Valid(ref, base.Proof(secret, Dialer)) {
		t.Fatal("the same transcript gives another proof")
	}
	variants := map[string][]byte{
		"other side":   base.Proof(secret, Listener),
		"other secret": base.Proof([]byte("0123456789abcdeX"), Dialer),
	}
	for name, change := range map[string]func(*Transcript){
		"label":          func(t *Transcript) { t.Label = "m" },
		"dialer hello":   func(t *Transcript) { t.DialerHello = []byte("aX") },
		"listener hello": func(t *Transcript) { t.ListenerHello = []byte("X") },
		"hello boundary": func(t *Transcript) { t.DialerHello, t.ListenerHello = []byte("a"), []byte("bc") },
		"dialer nonce":   func(t *Transcript) { t.DialerNonce = bytes.Repeat([]byte{3}, NonceLen) },
		"listener nonce": func(t *Transcript) { t.ListenerNonce = bytes.Repeat([]byte{3}, NonceLen) },
	} {
		tr := base
		change(&tr)
		variants[name] = tr.Proof(secret, Dialer)
	}
	for name, p := range variants {
		if Valid(p, ref) {
			t.Errorf("%s: same proof", name)
		}
	}
	if Valid(ref[:31], ref) || Valid(nil, ref) {
		t.Error("a truncated proof is valid")
	}
}

func TestNonces(t *testing.T) {
	a, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != NonceLen || bytes.Equal(a, b) {
		t.Fatalf("nonces %x %x", a, b)
	}
	if err := CheckPeerNonce(b, a); err != nil {
		t.Errorf("fresh nonce refused: %v", err)
	}
	if err := CheckPeerNonce(a, a); err == nil || !strings.Contains(err.Error(), "echoed") {
		t.Errorf("echo: %v", err)
	}
	if err := CheckPeerNonce(a[:31], a); err == nil || !strings.Contains(err.Error(), "31 bytes, want 32") {
		t.Errorf("short nonce: %v", err)
	}
}

func TestCheckSecret(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {1, false}, {MinSecretLen - 1, false}, {MinSecretLen, true}, {64, true}} {
		if err := CheckSecret(make([]byte, tc.n)); (err == nil) != tc.ok {
			t.Errorf("%d bytes: %v", tc.n, err)
		}
	}
}
