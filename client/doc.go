// Package client is the Go client of Kairos, a multi-tenant job queue on
// Redis that speaks lmstfy's HTTP API.
//
// A Client works in one namespace with one token; every method takes a
// context first and returns an error: an *APIError for answers of the
// server (status, message, request ID), matched with errors.Is against
// ErrNoJob, ErrNotFound, ErrUnauthorized, ErrRateLimited and the other
// sentinels. Times are time.Duration; the server counts whole seconds, so
// sub-second durations are rounded up.
//
//	c, err := client.New("127.0.0.1:7777", client.WithNamespace("demo"), client.WithToken(token))
//	id, err := c.Publish(ctx, "emails", []byte("hello"), client.TTL(time.Hour), client.Tries(3))
//	job, err := c.Consume(ctx, "emails", 30*time.Second, 10*time.Second)
//	err = c.Ack(ctx, "emails", job.ID)
//
// A Worker runs handlers over one or several queues with long-polls, ACKs
// what succeeds and survives server restarts. Admin manages tokens, rate
// limits and pools through the admin API.
//
// The client works against lmstfy servers too, except for the Kairos
// extensions, which are documented as such.
package client
