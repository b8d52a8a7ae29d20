package jobs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
)

// Whose word is an outcome. Every executor may write the results bucket
// (a job's running state, a cancel), and anything one stores there another
// reads: so "succeeded" or "dead" in a record proves nothing by itself. A
// final outcome counts only when the broker (broker.go), the job queue's
// part of leasemgr, stored it for the executor that took that delivery of
// the job, proved by the bind token the broker gave that executor with the
// job. The broker signs such a record: an HMAC, with a key only lease
// managers can read, over the job id and the exact bytes stored, carried
// in the SignatureHeader of the stored message. Readers ask the broker to
// check it (they do not have the key); a final record that fails is
// refused and counted, never reported as the job's outcome.

// SignatureHeader carries a record's signature on its stored message.
const SignatureHeader = "Slotlease-Signature"

// KeySize is the broker's key length in bytes.
const KeySize = 32

// ErrKey: a broker key of the wrong size.
var ErrKey = errors.New("jobs: the broker's key must be 32 bytes")

// signer computes the broker's tokens and signatures. Only leasemgr holds
// one.
type signer struct{ key []byte }

func newSigner(key []byte) (signer, error) {
	if len(key) != KeySize {
		return signer{}, ErrKey
	}
	return signer{key: append([]byte(nil), key...)}, nil
}

func (s signer) mac(parts ...string) string {
	h := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// bind is the token that names the taker of one delivery (its ack subject
// reply) of job id: only the executor the broker gave the job to knows it.
func (s signer) bind(reply, id string) string { return s.mac("bind-v1", reply, id) }

// sign is the signature of job id's record stored as value.
func (s signer) sign(id string, value []byte) string { return s.mac("record-v1", id, digest(value)) }

// check reports whether sig signs job id's record with the given digest
// (of the stored bytes), in constant time.
func (s signer) check(id, dig, sig string) bool {
	return hmac.Equal([]byte(s.mac("record-v1", id, dig)), []byte(sig))
}

// checkBind reports whether token is the bind token of reply and id.
func (s signer) checkBind(reply, id, token string) bool {
	return hmac.Equal([]byte(s.bind(reply, id)), []byte(token))
}

// digest is the hex SHA-256 of a stored record: what readers send the
// broker to check, instead of the record.
func digest(value []byte) string {
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:])
}
