package lease

import (
	"crypto/rand"
	"encoding/base64"
)

// SecretBytes is how many random bytes a secret the client draws holds:
// 128 bits, so guessing one is hopeless even without the manager's bound
// on wrong secrets (docs/security.md, "What must stay secret").
const SecretBytes = 16

// newSecret draws an acquire's secret from the operating system's CSPRNG,
// as 22 characters of unpadded base64url. It shares nothing with the
// request id: a NUID (what ids are) is a random prefix plus a counter with
// a small random step, so a secret drawn from the same generator right
// after the id was the id plus 33..333, found in a few hundred guesses by
// anyone who saw the lease id in an event.
func newSecret() string {
	var b [SecretBytes]byte
	// crypto/rand.Read never fails (it crashes the program if the kernel
	// cannot give randomness, rather than hand out a weak secret).
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
