package config

import (
	"fmt"
	"slices"
	"strings"
)

// EnvNATSReplyPrefixes lists, comma-separated, the inbox prefixes the lease
// manager may answer besides "_INBOX": the NATS_INBOX_PREFIX values of the
// deployment's executors, e.g. "_INBOX_executor_a,_INBOX_executor_b". A
// request whose reply subject is under none of them gets no answer (see
// docs/security.md, "Replies go only to inboxes").
const EnvNATSReplyPrefixes = "NATS_REPLY_PREFIXES"

// resolveReplyPrefixes parses NATS_REPLY_PREFIXES into c.ReplyPrefixes.
// Each entry is checked like NATS_INBOX_PREFIX (dot-separated tokens, no
// wildcards, no empty tokens) and must not lie in or around the product's
// own subjects (LEASE_SUBJECT_PREFIX): replies there would be events or
// requests.
func (c *Manager) resolveReplyPrefixes(m map[string]string) []error {
	raw := m[EnvNATSReplyPrefixes]
	if raw == "" {
		return nil
	}
	var errs []error
	for _, entry := range strings.Split(raw, ",") {
		err := func() error {
			if err := checkEntry(entry); err != nil {
				return err
			}
			if err := checkInboxPrefix(entry); err != nil {
				return err
			}
			if overlaps(entry, c.SubjectPrefix) {
				return reason(fmt.Sprintf("overlaps the lease subjects (%s %q): replies there would be requests or events", EnvSubjectPrefix, c.SubjectPrefix))
			}
			if slices.Contains(c.ReplyPrefixes, entry) {
				return reason("listed twice")
			}
			return nil
		}()
		if err != nil {
			errs = append(errs, &VarError{Var: EnvNATSReplyPrefixes, Value: entry, Entry: true, Reason: err.Error(), Err: err})
			continue
		}
		c.ReplyPrefixes = append(c.ReplyPrefixes, entry)
	}
	return errs
}

// overlaps reports whether one of the dot-separated subjects a and b is a
// token-wise prefix of the other ("lease" and "lease.x", or equal).
func overlaps(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return a == b || strings.HasPrefix(b, a+".")
}
