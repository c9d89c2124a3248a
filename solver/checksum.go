package solver

import (
	"fmt"
	"math"

	"github.com/gpucomm/gpucomm/comm"
	"github.com/gpucomm/gpucomm/devmem"
)

// The checksum of a field is the sum, modulo 2^64, of one 64-bit digest per
// cell, each made from the cell's global index (row major, boundary
// included) and the bits of its value in the field's element type. A sum
// does not depend on the order it is taken in, so each rank digests the
// cells it owns and one AllReduce adds the ranks' sums: the checksum is the
// same for every rank count, decomposition, backend and device, with no
// gather of the field. Every cell's digest goes through splitmix64's
// finaliser twice, so a change of any bit of any cell, or two cells
// swapped, changes the checksum (but for a chance of 2^-64).

// cellDigest is the digest of the cell at global index k holding bits.
func cellDigest(k, bits uint64) uint64 {
	return mix64(mix64(k+0x9e3779b97f4a7c15) ^ bits)
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// cellBits are the bits of v in element type dt (v, a float32 widened to
// float64, narrows back exactly).
func cellBits(v float64, dt DType) uint64 {
	if dt == Float32 {
		return uint64(math.Float32bits(float32(v)))
	}
	return math.Float64bits(v)
}

// FieldChecksum is the checksum of an N×M field of element type dt (row
// major, boundary included, float32 values widened as Reference and Gather
// give them): what Solver.Checksum returns when the solver's field equals
// it bit for bit.
func FieldChecksum(field []float64, n, m int, dt DType) (uint64, error) {
	switch {
	case n < 1 || m < 1 || len(field)%m != 0 || len(field)/m != n: // n*m may overflow
		return 0, invalid("FieldChecksum of %d values as a %d×%d field", len(field), n, m)
	case dt != Float64 && dt != Float32:
		return 0, invalid("FieldChecksum in element type %d", int(dt))
	}
	var sum uint64
	for k, v := range field {
		sum += cellDigest(uint64(k), cellBits(v, dt))
	}
	return sum, nil
}

// Checksum is the checksum of the current field (see FieldChecksum),
// returned on every rank. It is collective.
func (s *Solver) Checksum() (uint64, error) {
	im := s.live()
	if im == nil {
		return 0, errZero
	}
	return im.checksum()
}

func (s *solverT[T]) checksum() (uint64, error) {
	if s.closed {
		return 0, fmt.Errorf("solver: Checksum after Close: %w", comm.ErrClosed)
	}
	cfg, l := s.cfg, s.l
	m := uint64(cfg.M)
	var sum uint64
	if l.rows > 0 && l.cols > 0 {
		block, err := devmem.AllocSlice[T](s.dev, l.rows*l.cols)
		if err != nil {
			return 0, err
		}
		defer block.Free()
		if err := s.pack(block); err != nil {
			return 0, err
		}
		if err := s.compute.Synchronize(); err != nil {
			return 0, err
		}
		cells, err := block.ToHost(s.compute)
		if err != nil {
			return 0, err
		}
		for i := range l.rows {
			row := uint64(l.row0+i) * m
			for j, v := range cells[i*l.cols : (i+1)*l.cols] {
				sum += cellDigest(row+uint64(l.col0+j), cellBits(float64(v), cfg.DType))
			}
		}
	}
	// The boundary, which no rank owns and none changes, is rank 0's to add.
	if s.c.Rank() == 0 {
		for i := range cfg.N {
			for j := range cfg.M {
				if i == 0 || j == 0 || i == cfg.N-1 || j == cfg.M-1 {
					sum += cellDigest(uint64(i)*m+uint64(j), cellBits(float64(T(cfg.initial(i, j))), cfg.DType))
				}
			}
		}
	}
	buf, err := devmem.AllocSlice[uint64](s.dev, 1)
	if err != nil {
		return 0, err
	}
	defer buf.Free()
	if err := buf.CopyFrom([]uint64{sum}, nil); err != nil {
		return 0, err
	}
	// Unsigned addition wraps: the sum modulo 2^64, in any order.
	if err := comm.AllReduce(s.c, buf, buf, comm.Sum, nil); err != nil {
		return 0, fmt.Errorf("solver: checksum: %w", err)
	}
	out, err := buf.ToHost(nil)
	if err != nil {
		return 0, err
	}
	return out[0], nil
}
