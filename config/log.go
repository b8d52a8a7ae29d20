package config

import (
	"io"
	"log/slog"
	"strings"
)

// logLevels maps LOG_LEVEL values to slog levels.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// resolveLog checks LOG_LEVEL and LOG_FORMAT, case-insensitively, and
// stores them in lower case.
func (c *Common) resolveLog() []error {
	var errs []error
	lvl := strings.ToLower(c.LogLevel)
	if _, ok := logLevels[lvl]; ok {
		c.LogLevel = lvl
	} else {
		errs = append(errs, varErr(EnvLogLevel, c.LogLevel, reason("must be debug, info, warn or error")))
	}
	format := strings.ToLower(c.LogFormat)
	if format == "text" || format == "json" {
		c.LogFormat = format
	} else {
		errs = append(errs, varErr(EnvLogFormat, c.LogFormat, reason("must be text or json")))
	}
	return errs
}

// Logger returns the process's structured logger writing to w: one JSON
// object per line with LOG_FORMAT=json, logfmt-style key=value lines
// otherwise, dropping records below LOG_LEVEL. On a Common that did not
// come from a Load function, unknown values fall back to the defaults
// (text, info).
func (c Common) Logger(w io.Writer) *slog.Logger {
	lvl, ok := logLevels[strings.ToLower(c.LogLevel)]
	if !ok {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if strings.EqualFold(c.LogFormat, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
