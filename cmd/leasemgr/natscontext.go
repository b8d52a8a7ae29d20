package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
)

// natsContext is a `nats` CLI context: the fields of its JSON file
// (github.com/nats-io/jsm.go/natscontext) that slotlease fills in.
type natsContext struct {
	Description string `json:"description"`
	URL         string `json:"url"`
	User        string `json:"user,omitempty"`
	Password    string `json:"password,omitempty"`
	Creds       string `json:"creds,omitempty"`
	NKey        string `json:"nkey,omitempty"`
	Cert        string `json:"cert,omitempty"`
	Key         string `json:"key,omitempty"`
	CA          string `json:"ca,omitempty"`
	InboxPrefix string `json:"inbox_prefix,omitempty"`
}

// contextMark begins the description of every context this command
// writes: a context file without it is someone else's, never overwritten.
const contextMark = "slotlease:"

var contextName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// natsContextSetup: leasemgr nats-context writes `nats` CLI contexts that
// reach this node's NATS as slotlease's clients do: the embedded server's
// role credentials with each role's inbox prefix, or the credentials the
// environment names.
func natsContextSetup(cmd *cobra.Command) action {
	flags := cmd.Flags()
	var roles roleList
	flags.Var(&roles, "role", "a role of the embedded server to write a context for: manager, executor or reader (repeatable; default all three)")
	name := flags.String("name", "slotlease", "the contexts' name: NAME-ROLE for the embedded server's roles, NAME for the credentials the environment names")
	dir := flags.String("dir", "", "where the nats CLI keeps contexts (default $XDG_CONFIG_HOME/nats/context, else ~/.config/nats/context)")
	names := make([]string, len(config.Roles))
	for i, r := range config.Roles {
		names[i] = string(r)
	}
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("dir")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(_ context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("nats-context takes no arguments, got %q", args)}
		}
		return runNATSContext(roles, *name, *dir, stdout)
	}
}

// runNATSContext writes the contexts of roles (all if none) named name
// into dir (the nats CLI's default if "").
func runNATSContext(roles roleList, name, dir string, stdout io.Writer) error {
	if !contextName.MatchString(name) {
		return usageError{fmt.Errorf("--name %q: use 1-64 letters, digits, '-' or '_'", name)}
	}
	if dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return usageError{fmt.Errorf("no default for --dir: %w", err)}
		}
		dir = filepath.Join(base, "nats", "context")
	}
	cfg, err := config.LoadCommon()
	if err != nil {
		return usageError{fmt.Errorf("configuration:\n%w", err)}
	}
	contexts, err := contextsFor(cfg, name, roles)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, c := range contexts { // all or none
		if err := checkOurs(contextPath(dir, c.name)); err != nil {
			return err
		}
	}
	for _, c := range contexts {
		path, err := writeContext(dir, c.name, c.ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\t%s\n", c.name, path)
	}
	fmt.Fprintf(stdout, "use one with: nats --context %s micro ls leasemgr\n", leastPrivileged(contexts))
	return nil
}

// leastPrivileged names the context of the role with the fewest rights
// among contexts (the reader's, when there is one): the one to suggest.
func leastPrivileged(contexts []namedContext) string {
	best := contexts[0].name
	for _, c := range contexts {
		if strings.HasSuffix(c.name, "-"+string(config.RoleReader)) {
			return c.name
		}
		if strings.HasSuffix(c.name, "-"+string(config.RoleExecutor)) {
			best = c.name
		}
	}
	return best
}

type namedContext struct {
	name string
	ctx  natsContext
}

// contextsFor is the contexts to write: one per role of the embedded
// server's credentials, or one for the credentials cfg names.
func contextsFor(cfg *config.Common, name string, roles roleList) ([]namedContext, error) {
	url := cfg.NATSAddress()
	base := natsContext{URL: url, CA: cfg.NATSTLSCA, Cert: cfg.NATSTLSCert, Key: cfg.NATSTLSKey}
	if cfg.NATSCreds != "" || cfg.NATSNKey != "" || cfg.NATSUser != "" {
		if len(roles) > 0 {
			return nil, usageError{errors.New("--role picks a credential of the embedded server, but NATS_CREDS, NATS_NKEY or NATS_USER names one: unset it, or leave out --role")}
		}
		c := base
		c.Description = fmt.Sprintf("%s the credentials leasemgr nats-context found in the environment, for %s", contextMark, url)
		c.Creds, c.NKey, c.User, c.Password = absPath(cfg.NATSCreds), absPath(cfg.NATSNKey), cfg.NATSUser, cfg.NATSPassword
		c.InboxPrefix = cfg.NATSInboxPrefix
		return []namedContext{{name, c}}, nil
	}
	if len(roles) == 0 {
		roles = roleList(config.Roles)
	}
	var out []namedContext
	for _, r := range roles {
		rc := *cfg
		ok, err := rc.UseEmbeddedCreds(r)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("no credentials for %s: no embedded server's credentials in %q (%s; leasemgr run without NATS_URL makes them) and none of NATS_CREDS, NATS_NKEY, NATS_USER is set", url, cfg.NATSAuthDir, config.EnvNATSAuthDir)
		}
		c := base
		c.Description = fmt.Sprintf("%s the %s role of the embedded server at %s", contextMark, r, url)
		c.NKey, c.InboxPrefix = absPath(rc.NATSNKey), rc.NATSInboxPrefix
		out = append(out, namedContext{name + "-" + string(r), c})
	}
	return out, nil
}

func absPath(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func contextPath(dir, name string) string { return filepath.Join(dir, name+".json") }

// checkOurs returns an error if a file at path exists that this command
// did not write: someone's own context, never overwritten.
func checkOurs(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var old natsContext
	if json.Unmarshal(b, &old) != nil || !strings.HasPrefix(old.Description, contextMark) {
		return fmt.Errorf("%s exists and is not a context leasemgr nats-context wrote: remove it, or pick another --name", path)
	}
	return nil
}

// writeContext writes c as dir/name.json, readable by its owner only (it
// may hold a password), replacing it atomically; checkOurs first.
func writeContext(dir, name string, c natsContext) (string, error) {
	path := contextPath(dir, name)
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(f.Name(), path)
}

// roleList is a repeatable --role flag.
type roleList []config.Role

// String is the roles given, comma-separated ("" for none: help shows no
// default).
func (l *roleList) String() string {
	names := make([]string, len(*l))
	for i, r := range *l {
		names[i] = string(r)
	}
	return strings.Join(names, ",")
}

func (l *roleList) Type() string { return "ROLE" }

func (l *roleList) Set(s string) error {
	for _, r := range config.Roles {
		if string(r) == s {
			*l = append(*l, r)
			return nil
		}
	}
	return fmt.Errorf("unknown role %q: manager, executor or reader", s)
}
