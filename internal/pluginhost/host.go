// Package pluginhost hands what a Sluice plugin runs (its dispatcher, client and price table) to the
// packages that build on it, such as the gate, without making them public API: the interceptor sets
// Of when it is initialised.
package pluginhost

import (
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/internal/dispatcher"
	"github.com/sluicehq/sluice/throttle"
)

// Host is what a plugin runs.
type Host struct {
	// Dispatcher writes, admits and runs the plugin's tickets.
	Dispatcher *dispatcher.Dispatcher
	// Client is the plugin's Temporal client.
	Client client.Client
	// Prices prices models; nil for none.
	Prices *throttle.PriceTable
	// Owner is the plugin's owner ID.
	Owner string
	// Logger receives the plugin's logs.
	Logger *slog.Logger
	// Attach records that a gate is hosted on the plugin.
	Attach func()
}

// Of returns the Host of plugin, an *interceptor.Plugin, and false for anything else. The interceptor
// package sets it in its init.
var Of = func(plugin any) (Host, bool) { return Host{}, false }
