package urom

import (
	"bytes"
	"testing"
)

// StartEmbedded reads the announce line in both forms a service prints.
func TestAnnounceForms(t *testing.T) {
	var console, js bytes.Buffer
	Announce(&console, "127.0.0.1:18800")
	AnnounceJSON(&js, "127.0.0.1:18800")
	if console.String() != "UROM_LISTEN 127.0.0.1:18800\n" || js.String() != `{"urom_listen":"127.0.0.1:18800"}`+"\n" {
		t.Errorf("announce lines %q, %q", console.String(), js.String())
	}
	for _, line := range []string{"UROM_LISTEN 127.0.0.1:18800", `{"urom_listen":"127.0.0.1:18800"}`} {
		if addr, ok := parseAnnounce(line); !ok || addr != "127.0.0.1:18800" {
			t.Errorf("parseAnnounce(%q) = %q, %v", line, addr, ok)
		}
	}
	for _, line := range []string{"", "listening on 127.0.0.1:1", `{"msg":"UROM service listening"}`, `{"urom_listen":""}`, `{"urom_listen":`} {
		if addr, ok := parseAnnounce(line); ok {
			t.Errorf("parseAnnounce(%q) = %q, want no address", line, addr)
		}
	}
}
