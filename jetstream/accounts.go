package jetstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// The accounts of a server with users (the embedded server, and the test
// cluster that runs docs/security.md's layout). An account is the boundary
// the NATS server itself keeps: each has its own subject space and its own
// JetStream, and nothing crosses but what one account exports and another
// imports.
//
// That boundary is what keeps lease state safe from the server acting on
// a client's behalf. JetStream answers every API request and direct get on
// the reply subject the requester wrote, publishing as the server inside
// the requester's account, with the stored message's bytes and headers
// (KV-Operation, Nats-Rollup); publish permissions are checked on the
// request subject, never on the reply. So any user with any JetStream
// right in an account can make the server publish what it likes on any
// subject of that account. Only the managers' users live in
// ManagerAccount; executors and readers live in accounts of their own,
// which import exactly the lease services and the event stream:
//
//   - ManagerAccount (SLOTLEASE): the managers. The lease, leadership and
//     pool buckets, the event stream, the request and control subjects.
//     Exports the lease verbs, stats, snapshots, the discovery ping and the
//     events, and a direct get on the event stream for readers.
//   - ExecutorAccount (SLOTLEASE_EXECUTORS): executors, and the job queue
//     in its own JetStream. A request crosses into ManagerAccount through
//     a service import, whose reply the server maps to a fresh "_R_."
//     subject there: whatever reply an executor writes, the answer lands
//     in its own account. What JetStream publishes for it (an answer aimed
//     at an imported request subject) arrives without a reply subject,
//     which the manager never acts on (manager/replyto.go).
//   - ReaderAccount (SLOTLEASE_READERS): readers, with no JetStream at all.
//   - SystemAccount (SYS): exports the executors' disconnect advisories and
//     their connection listing (CONNZ) to ManagerAccount, for fast release.
const (
	ManagerAccount        = "SLOTLEASE"
	ExecutorAccount       = "SLOTLEASE_EXECUTORS"
	ReaderAccount         = "SLOTLEASE_READERS"
	EmbeddedSystemAccount = "SYS"
	// ExecutorDisconnectSubject is where the server's disconnect
	// advisories of the executors' account reach the managers.
	ExecutorDisconnectSubject = "$SYS.ACCOUNT." + ExecutorAccount + ".DISCONNECT"
	// ExecutorConnzSubject lists the executors' account's connections:
	// the managers ask it to confirm a close (manager/closecheck.go).
	ExecutorConnzSubject = "$SYS.REQ.ACCOUNT." + ExecutorAccount + ".CONNZ"
	// AnonymousDisconnectSubject is where an Anonymous (test) server's
	// disconnect advisories arrive: everyone shares ManagerAccount there.
	AnonymousDisconnectSubject = "$SYS.ACCOUNT." + ManagerAccount + ".DISCONNECT"
	// anonymousUser is the user an Anonymous (test) server gives clients
	// that bring no credentials.
	anonymousUser = "anonymous"
)

// AccountOf is the account a role's users live in.
func AccountOf(r config.Role) string {
	switch r {
	case config.RoleManager:
		return ManagerAccount
	case config.RoleExecutor:
		return ExecutorAccount
	}
	return ReaderAccount
}

// The server configuration's shapes: JSON, which its parser reads.
type (
	perm struct {
		Allow []string `json:"allow"`
	}
	perms struct {
		Publish   *perm `json:"publish,omitempty"`
		Subscribe *perm `json:"subscribe,omitempty"`
	}
	confUser struct {
		NKey        string `json:"nkey,omitempty"`
		User        string `json:"user,omitempty"`
		Permissions *perms `json:"permissions,omitempty"`
	}
	export struct {
		Service           string   `json:"service,omitempty"`
		Stream            string   `json:"stream,omitempty"`
		Accounts          []string `json:"accounts"`
		ResponseType      string   `json:"response_type,omitempty"`
		ResponseThreshold string   `json:"response_threshold,omitempty"`
	}
	importFrom struct {
		Account string `json:"account"`
		Subject string `json:"subject"`
	}
	confImport struct {
		Service *importFrom `json:"service,omitempty"`
		Stream  *importFrom `json:"stream,omitempty"`
		// Share puts the requester's connection (server, client id) into
		// the Nats-Request-Info header the server sets on a request that
		// crosses the import: what the manager counts queued requests by
		// (manager/connqueue.go).
		Share bool `json:"share,omitempty"`
	}
	account struct {
		// JetStream is "enabled" (no limits) or a jsLimits block.
		JetStream any          `json:"jetstream,omitempty"`
		Limits    *connLimits  `json:"limits,omitempty"`
		Users     []confUser   `json:"users,omitempty"`
		Exports   []export     `json:"exports,omitempty"`
		Imports   []confImport `json:"imports,omitempty"`
	}
)

// service is one subject an account exports as a service: multi says the
// requester may get more than one answer to one request (an acquire's
// "queued" then "granted", a renewal's "bound" then "renewed", every
// manager's discovery answer), so the server keeps the reply mapping for
// multiResponseThreshold rather than dropping it after the first answer.
// Every request keeps one mapping that long, so the threshold is what a
// flood of requests costs the server; a queued acquire is re-sent every
// few seconds (5 s by the Go client), each time with a fresh mapping, so
// its grant finds one. A client that polls less often than the threshold
// hears its grant at its next poll, as after a lost reply.
type service struct {
	subject string
	multi   bool
	to      []string
	// share: the importer shares the requester's connection with the
	// managers (the acquire: see confImport.Share). It costs the server
	// an encoded header per request, so only where it is used.
	share bool
}

// multiResponseThreshold is how long the server keeps a multi-answer
// request's reply mapping.
const multiResponseThreshold = "30s"

// managerServices are what ManagerAccount exports, and to whom.
func managerServices(p string) []service {
	exe, both := []string{ExecutorAccount}, []string{ExecutorAccount, ReaderAccount}
	services := []service{
		{subject: lease.Subject(p, "*", "*", lease.VerbAcquire), multi: true, to: exe, share: true},
		{subject: lease.Subject(p, "*", "*", lease.VerbRenew), multi: true, to: exe, share: true},
		{subject: lease.Subject(p, "*", "*", lease.VerbRelease), to: exe, share: true},
		{subject: lease.Subject(p, "*", "*", lease.VerbCancel), to: exe, share: true},
		{subject: lease.StatsSubject(p, "*"), to: both},
		{subject: lease.SnapshotSubject(p, "*"), to: []string{ReaderAccount}},
		// leasemgr watch --since: a direct get answers only on its
		// (mapped) reply, so it cannot be made to publish into this
		// account; a consumer could (its deliver subject), so readers get
		// none.
		{subject: "$JS.API.DIRECT.GET." + NamesFor(p).Events, multi: true, to: []string{ReaderAccount}},
	}
	// Discovery (`nats micro ls leasemgr`): every manager answers.
	for _, subj := range lease.DiscoverySubjects() {
		services = append(services, service{subject: subj, multi: true, to: both})
	}
	return services
}

// authConfig is the accounts section of a server configuration admitting
// users, for subject prefix p: the managers, executors and readers each in
// their account (see above), the executors' and readers' bounded by
// limits (limits.go), plus the system account. With no users it admits
// anonymous clients into ManagerAccount with every right (tests): one
// account, with its disconnect advisories, so fast release works there
// too.
func authConfig(users []User, p string, limits AccountLimits) (string, error) {
	top, err := authSection(users, p, limits)
	if err != nil {
		return "", err
	}
	return encodeConfig(top, "")
}

// authSection is authConfig's content: the top-level keys
// system_account, accounts and (anonymous) no_auth_user.
func authSection(users []User, p string, limits AccountLimits) (map[string]any, error) {
	top := map[string]any{"system_account": EmbeddedSystemAccount}
	if len(users) == 0 {
		top["no_auth_user"] = anonymousUser
		top["accounts"] = map[string]account{
			ManagerAccount: {JetStream: "enabled", Users: []confUser{{User: anonymousUser}}, Imports: []confImport{
				{Stream: &importFrom{Account: EmbeddedSystemAccount, Subject: AnonymousDisconnectSubject}},
			}},
			EmbeddedSystemAccount: {Exports: []export{{Stream: AnonymousDisconnectSubject, Accounts: []string{ManagerAccount}}}},
		}
		return top, nil
	}
	if p == "" {
		return nil, errors.New("jetstream: accounts: no subject prefix")
	}
	accounts := map[string]account{
		ManagerAccount: {JetStream: "enabled", Imports: []confImport{
			{Stream: &importFrom{Account: EmbeddedSystemAccount, Subject: ExecutorDisconnectSubject}},
			{Service: &importFrom{Account: EmbeddedSystemAccount, Subject: ExecutorConnzSubject}},
		}},
		ExecutorAccount: {JetStream: limits.executorJetStream(), Limits: limits.executorConns()},
		ReaderAccount:   {Limits: limits.readerConns()},
		EmbeddedSystemAccount: {Exports: []export{
			{Stream: ExecutorDisconnectSubject, Accounts: []string{ManagerAccount}},
			{Service: ExecutorConnzSubject, Accounts: []string{ManagerAccount}, ResponseType: "stream"},
		}},
	}
	add := func(name string, f func(*account)) {
		a := accounts[name]
		f(&a)
		accounts[name] = a
	}
	events := p + ".events.>"
	add(ManagerAccount, func(a *account) {
		for _, s := range managerServices(p) {
			e := export{Service: s.subject, Accounts: s.to}
			if s.multi {
				e.ResponseType, e.ResponseThreshold = "stream", multiResponseThreshold
			}
			a.Exports = append(a.Exports, e)
		}
		a.Exports = append(a.Exports, export{Stream: events, Accounts: []string{ExecutorAccount, ReaderAccount}})
	})
	for _, s := range managerServices(p) {
		for _, to := range s.to {
			add(to, func(a *account) {
				a.Imports = append(a.Imports, confImport{Service: &importFrom{Account: ManagerAccount, Subject: s.subject}, Share: s.share})
			})
		}
	}
	jobEvents := jobs.NamesFor(p).EventSubjects()
	add(ExecutorAccount, func(a *account) {
		a.Imports = append(a.Imports, confImport{Stream: &importFrom{Account: ManagerAccount, Subject: events}})
		a.Exports = append(a.Exports, export{Stream: jobEvents, Accounts: []string{ReaderAccount}})
	})
	add(ReaderAccount, func(a *account) {
		a.Imports = append(a.Imports,
			confImport{Stream: &importFrom{Account: ManagerAccount, Subject: events}},
			confImport{Stream: &importFrom{Account: ExecutorAccount, Subject: jobEvents}})
	})
	for _, u := range users {
		if !nkeys.IsValidPublicUserKey(u.NKey) {
			return nil, fmt.Errorf("jetstream: %s user: not a public user nkey", u.Role)
		}
		cu := confUser{NKey: u.NKey}
		if u.Publish != nil || u.Subscribe != nil {
			// An empty allow list must stay a list: nil would allow all.
			cu.Permissions = &perms{Publish: &perm{Allow: append([]string{}, u.Publish...)}, Subscribe: &perm{Allow: append([]string{}, u.Subscribe...)}}
		}
		add(AccountOf(u.Role), func(a *account) { a.Users = append(a.Users, cu) })
	}
	top["accounts"] = accounts
	return top, nil
}

// encodeConfig writes v as JSON without HTML escaping: the parser knows no
// \u escapes, and '>' is in nearly every subject. indent, if not empty,
// puts each value on a line of its own (files people read).
func encodeConfig(v any, indent string) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	err := enc.Encode(v)
	return b.String(), err
}
