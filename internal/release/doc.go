// Package release holds the tests of Sluice's release tooling, and nothing else: the API check
// (scripts/api-check.sh, run against a throwaway git repository) and the rolling upgrade from the
// last release (a worker binary built from the newest v* tag and one built from the working tree,
// replacing each other on one task queue and one schema while workflows run). See docs/upgrading.md.
package release
