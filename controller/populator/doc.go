// Package populator is the volume populator of claims whose dataSourceRef
// names a GoldenImage or a GoldenImageChannel (apiGroup thinlvm.io): it
// makes a claim in the controller's namespace that the CSI provisioner turns
// into a thin snapshot of the image's base, and hands its volume to the
// tenant's claim. It writes no data and runs no pod, and it never leaves a
// claim of its own or a finalizer behind once the tenant's claim is bound
// or gone.
package populator
