// Package solver integrates the 2-D heat equation u_t = a (u_xx + u_yy) with
// explicit FTCS steps on an N×M grid of float64 or float32 (Config.DType)
// with fixed boundary values, split among the ranks of any
// comm.Communicator: in row slabs, or on a 2-D Cartesian grid of ranks with
// packed column halos.
//
// Each step queues the update of the cells that need no halo on a compute
// stream, then the halo exchange (comm.GroupP2P) on a communication stream,
// and updates the cells next to the halos once an event says they have
// arrived. The interior is queued first so that a backend whose GroupP2P
// holds the host until the halos have moved (MPI) still finds the GPU busy.
// Overlap can be switched off: then one stream does the exchange and then
// the whole update.
//
// Every k steps (Config.ResidualEvery) the residual, the norm of the change,
// is computed by the step kernel itself: it writes one float64 sum of
// (u'-u)² per block while it updates the grid (kernels.HeatStepNorm), and
// kernels.SumBlocks adds the partials on the device in a fixed order; the
// other steps run the plain kernel. The ranks' sums are added with
// AllReduce on the communication stream of the next step, before its
// exchange, and with one rank not at all; the total goes to pinned memory
// in stream order, and Step reads it after its final synchronisation, so
// the host never waits for a residual inside Step.
//
// The result does not depend on the backend, the device, the number of ranks
// or the decomposition: the field after S steps equals Reference bit for
// bit, in either element type, and the residual (summed in float64 in
// another order) agrees with Reference's within ResidualTolerance and is the
// same from run to run. Check, Conformance and package solvertest test
// exactly that, for both element types, so that every backend can run the
// same solver check.
//
// solver sits above comm and kernels and must not import a backend.
package solver
