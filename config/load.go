package config

// LoadCommonAs is LoadCommon for a client of the lease manager's NATS in
// role: with no NATS credentials in the environment and an embedded
// server's auth directory for the address (NATS_AUTH_DIR or its default),
// it authenticates with that role's seed file (UseEmbeddedCreds). So
// executor and the leasemgr subcommands need no configuration on the
// host of an embedded server.
func LoadCommonAs(r Role) (*Common, error) {
	c, err := LoadCommon()
	if err != nil {
		return nil, err
	}
	if _, err := c.UseEmbeddedCreds(r); err != nil {
		return nil, err
	}
	return c, nil
}
