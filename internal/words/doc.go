// Package words holds the sentences and figures with which Sluice tells an operator about its
// tickets and limits: what holds a queued ticket, when it is expected to be admitted, what became of
// one that is not queued, and the durations, instants and amounts inside them. The sluice command
// (sluice explain, status, tickets) prints them and the dashboard serves them in its API, so that both
// say the same thing in the same words, from one source.
//
// Every function is pure: it reads no clock (the explanation's Now is the instant "now" means) and is
// safe for concurrent use. Instants are written in UTC.
package words
