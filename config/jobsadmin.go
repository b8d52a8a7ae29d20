package config

// The job queue's administrator on a NATS of your own. The job broker
// (jobs/broker.go) runs in leasemgr with the rights of the job queue's
// administrator in the executors' account: it makes the queue's consumers
// and stores signed outcomes, which executors may not. leasemgr's embedded
// server gives it those rights itself; with NATS_URL, these variables give
// it the administrator's user (docs/security.md, "The layout": jobs-admin).
const (
	// EnvJobsNATSNKey is a file holding the administrator's nkey seed.
	EnvJobsNATSNKey = "JOBS_NATS_NKEY"
	// EnvJobsNATSUser and EnvJobsNATSPassword are its user and password.
	EnvJobsNATSUser     = "JOBS_NATS_USER"
	EnvJobsNATSPassword = "JOBS_NATS_PASSWORD"
)

// resolveJobsAdmin reads the job queue administrator's credentials from m
// into c: an nkey seed file, or a user and password; only with NATS_URL.
func (c *Manager) resolveJobsAdmin(m map[string]string) []error {
	c.JobsNATSNKey, c.JobsNATSUser, c.JobsNATSPassword = c.CredentialPath(m[EnvJobsNATSNKey]), m[EnvJobsNATSUser], m[EnvJobsNATSPassword]
	if !c.JobsAdmin() && c.JobsNATSPassword == "" {
		return nil
	}
	var errs []error
	if c.NATSURL == "" {
		for _, name := range []string{EnvJobsNATSNKey, EnvJobsNATSUser, EnvJobsNATSPassword} {
			if v := m[name]; v != "" {
				if name == EnvJobsNATSPassword {
					v = redacted
				}
				errs = append(errs, varErr(name, v, reason("is for a NATS of your own (NATS_URL): leasemgr's embedded server makes the job queue's administrator itself")))
			}
		}
		return errs
	}
	switch {
	case c.JobsNATSNKey != "" && c.JobsNATSUser != "":
		errs = append(errs, varErr(EnvJobsNATSUser, c.JobsNATSUser, reason("cannot be combined with JOBS_NATS_NKEY: set one way to authenticate")))
	case c.JobsNATSPassword != "" && c.JobsNATSUser == "":
		errs = append(errs, varErr(EnvJobsNATSPassword, redacted, reason("is set but JOBS_NATS_USER is not")))
	case c.JobsNATSNKey != "":
		if err := checkNKeySeed(c.JobsNATSNKey); err != nil {
			errs = append(errs, varErr(EnvJobsNATSNKey, c.JobsNATSNKey, err))
		} else if err := CheckSafeFile(c.JobsNATSNKey); err != nil {
			errs = append(errs, varErr(EnvJobsNATSNKey, c.JobsNATSNKey, err))
		}
	}
	return errs
}

// JobsAdmin reports whether leasemgr has the job queue administrator's
// credentials for a NATS of its own.
func (c *Manager) JobsAdmin() bool { return c.JobsNATSNKey != "" || c.JobsNATSUser != "" }
