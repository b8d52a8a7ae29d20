package main

import "github.com/slotlease/slotlease/httpapi"

// Descriptors leasemgr keeps for itself out of its descriptor limit, so
// that its embedded server's clients can never take them (the server gets
// the rest, jetstream.ConnectionLimits): before, executor connections
// took them all, and the HTTP API stopped answering.
const reservedDescriptors = httpapi.DefaultMaxConns + httpapi.DefaultMaxStreams + // the HTTP API
	256 + // the store's open files
	128 // the manager's own connections to its server (both ends are in this process), listeners, logs
