// Package solver integrates the 2-D heat equation u_t = a (u_xx + u_yy) with
// explicit FTCS steps on an N×M grid of float64 with fixed boundary values,
// split among the ranks of any comm.Communicator: in row slabs, or on a 2-D
// Cartesian grid of ranks with packed column halos.
//
// Each step posts the halo exchange (comm.GroupP2P) on a communication
// stream, updates the cells that need no halo on a compute stream, and
// updates the cells next to the halos once an event says they have arrived.
// Every k steps the residual, the norm of the change, is summed over the
// ranks with AllReduce. Overlap can be switched off: then one stream does
// the exchange and then the whole update.
//
// The result does not depend on the backend, the device, the number of ranks
// or the decomposition: the field after S steps equals Reference bit for
// bit. Check, Conformance and package solvertest test exactly that, so that
// every backend can run the same solver check.
//
// solver sits above comm and kernels and must not import a backend.
package solver
