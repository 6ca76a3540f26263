package cli

import (
	"bytes"
	"fmt"
	"os"

	"github.com/openrdmo/rdmo/internal/hmacauth"
)

// LoadSecret reads --secret-file: the file's contents, surrounding white
// space removed, are the shared secret (at least hmacauth.MinSecretLen
// bytes; e.g. `openssl rand -hex 32`). An empty path is no secret (nil).
// A file that cannot be read or holds too short a secret is a usage error
// (exit status 2), like any bad flag value.
func LoadSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, UsageError(fmt.Errorf("--secret-file: %w", err))
	}
	s := bytes.TrimSpace(b)
	if len(s) < hmacauth.MinSecretLen {
		return nil, Usagef("--secret-file %s: the secret is %d bytes; use at least %d random bytes (e.g. `openssl rand -hex 32 > %s`)", path, len(s), hmacauth.MinSecretLen, path)
	}
	return s, nil
}

// SecretWarning says why a secret file's permissions are unsafe, or "".
func SecretWarning(path string) string {
	if path == "" {
		return ""
	}
	st, err := os.Stat(path)
	if err == nil && st.Mode().Perm()&0o077 != 0 {
		return fmt.Sprintf("secret file %s is readable by other users (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	return ""
}
