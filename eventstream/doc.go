// Package eventstream reads the stream that keeps lease events
// (EVENT_RETENTION) with direct gets alone: Follow replays it from a time
// on and then follows it, Last reads its newest events.
//
// A direct get is the one JetStream request a reader may make of the
// managers' account (jetstream/accounts.go imports it into the readers'
// account as a service). Unlike a consumer, whose deliver subject the
// requester chooses, a direct get answers only on the request's reply,
// which the server maps back into the requester's own account, so it
// cannot be turned into a publish in the managers' account. It depends on
// nats.go alone.
package eventstream
