//go:build !invariants

package schedule

// invariants is false without the invariants build tag: steps run
// unchecked. See invariants_on.go.
const invariants = false
