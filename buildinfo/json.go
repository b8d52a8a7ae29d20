package buildinfo

// JSON is Info as `version --json` prints it.
type JSON struct {
	Version   string `json:"version"`
	SemVer    string `json:"semver"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
}

// JSON returns i for `version --json`.
func (i Info) JSON() JSON {
	return JSON{Version: i.Version, SemVer: i.SemVer(), Revision: i.Revision, Time: i.Time, Modified: i.Modified, GoVersion: i.GoVersion}
}
