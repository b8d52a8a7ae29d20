// Package natsconn connects a slotlease program to NATS: credentials, TLS
// and the inbox prefix (Auth), reconnecting for good (Connect), from the
// environment as the binaries read it (ConfigAuth), and, for a program on
// the same host as leasemgr's embedded server, with the credentials that
// server made, found as `executor` finds them (ConnectLocal). It depends
// on nats.go and package config alone: a client program that imports it
// does not link a NATS server.
package natsconn
