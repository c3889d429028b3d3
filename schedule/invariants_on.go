//go:build invariants

package schedule

// invariants is set by the invariants build tag: every Plan.Run, Stepper
// step, tree plan and generation checks each step against its declared
// regions (see RunChecked). CI runs the schedule's tests this way.
const invariants = true
