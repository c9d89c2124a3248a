package devmem

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The exporter's service. A process that exports GPU memory answers, on an
// abstract Unix socket named by its pid and a random token (both in its
// handles), the questions other processes of the node ask before they open
// one of its handles:
//
//   - is the allocation a legacy handle names still exported (not freed)?
//     A CUDA IPC handle of freed memory would otherwise open, and the opener
//     would use memory that is no longer the exporter's;
//   - the file descriptor of a VMM allocation, passed with SCM_RIGHTS, or a
//     refusal once it is freed.
//
// Abstract sockets belong to the network namespace, as a node's processes
// do; the service answers only processes of its own user (SO_PEERCRED), the
// rule the host driver's /proc/PID/fd gets from the kernel. The token keeps
// a process that later reuses the pid from answering for the one that died.

const (
	svcAlive  byte = 1 // request: is the allocation still exported?
	svcFD     byte = 2 // request: send the allocation's descriptor
	svcYes    byte = 0 // reply: exported (with the descriptor for svcFD)
	svcFreed  byte = 1 // reply: not exported here (freed, or never)
	svcRefuse byte = 2 // reply: not for this caller, or a malformed request

	svcReqLen = 1 + 64
	// svcTimeout bounds a question to another process, so that a stopped
	// exporter makes OpenIPC fail rather than hang.
	svcTimeout = 20 * time.Second
)

func svcName(pid, token uint32) string { return fmt.Sprintf("@gpucomm-ipc-%d-%08x", pid, token) }

// serviceToken starts this process's service once and returns its token.
var serviceToken = sync.OnceValues(func() (uint32, error) {
	var errs []error
	for range 4 { // a taken name (a token drawn twice) is drawn again
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("devmem: IPC service token: %w", err)
		}
		token := binary.LittleEndian.Uint32(b[:]) | 1 // never 0, which means "no service"
		l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: svcName(uint32(os.Getpid()), token), Net: "unixpacket"})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		go serve(l)
		return token, nil
	}
	return 0, fmt.Errorf("devmem: starting the IPC service: %w", errors.Join(errs...))
})

func serve(l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: keep serving
			continue
		}
		go serveConn(c)
	}
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

func serveConn(c *net.UnixConn) {
	defer c.Close()
	if uid, err := peerUID(c); err != nil || uid != uint32(os.Geteuid()) {
		c.Write([]byte{svcRefuse})
		return
	}
	buf := make([]byte, svcReqLen+1)
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Minute)) // an idle client is dropped eventually
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if n != svcReqLen || (buf[0] != svcAlive && buf[0] != svcFD) {
			c.Write([]byte{svcRefuse})
			return
		}
		var drv [64]byte
		copy(drv[:], buf[1:])
		status, fd := lookupServed(drv, buf[0] == svcFD)
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		c.SetWriteDeadline(time.Now().Add(svcTimeout))
		_, _, err = c.WriteMsgUnix([]byte{status}, oob, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			return
		}
	}
}

// lookupServed answers a request for the export drv names; for a descriptor
// it returns a duplicate, which the caller closes once sent, so that a Free
// meanwhile cannot close it under the sender.
func lookupServed(drv [64]byte, wantFD bool) (status byte, fd int) {
	ipcMu.Lock()
	defer ipcMu.Unlock()
	e := served[drv]
	switch {
	case e == nil:
		return svcFreed, -1
	case !wantFD:
		return svcYes, -1
	case e.fd < 0:
		return svcRefuse, -1 // a legacy export has no descriptor
	}
	dup, err := unix.FcntlInt(uintptr(e.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return svcRefuse, -1
	}
	return svcYes, dup
}

// askExporter puts one request to the service of the process that exported
// f and returns its answer: nil when the allocation is still exported (with
// its descriptor when wantFD, which the caller closes), an error wrapping
// ErrBadHandle when it is not or the exporter is gone.
func askExporter(f handleFields, wantFD bool) (fd int, err error) {
	name := svcName(f.pid, f.token)
	conn, err := net.DialTimeout("unixpacket", name, svcTimeout)
	if err != nil {
		return -1, badHandle("exporting process %d is gone or shares no memory (%v)", f.pid, err)
	}
	c := conn.(*net.UnixConn)
	defer c.Close()
	if uid, err := peerUID(c); err != nil || uid != uint32(os.Geteuid()) {
		return -1, badHandle("the service of process %d runs as uid %d, this process as %d (%v)", f.pid, uid, os.Geteuid(), err)
	}
	req := make([]byte, svcReqLen)
	req[0] = svcAlive
	if wantFD {
		req[0] = svcFD
	}
	copy(req[1:], f.drv[:])
	c.SetDeadline(time.Now().Add(svcTimeout))
	if _, err := c.Write(req); err != nil {
		return -1, fmt.Errorf("devmem: OpenIPC: asking process %d: %w", f.pid, err)
	}
	reply := make([]byte, 2)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(reply, oob)
	if err != nil {
		return -1, fmt.Errorf("devmem: OpenIPC: waiting for process %d: %w", f.pid, err)
	}
	fds := receivedFDs(oob[:oobn])
	keep := -1
	defer func() {
		for _, x := range fds {
			if x != keep {
				unix.Close(x)
			}
		}
	}()
	switch {
	case n != 1:
		return -1, fmt.Errorf("devmem: OpenIPC: process %d answered %d bytes", f.pid, n)
	case reply[0] == svcFreed:
		return -1, badHandle("process %d has freed the memory (or never exported it)", f.pid)
	case reply[0] != svcYes:
		return -1, badHandle("process %d refused the request", f.pid)
	case !wantFD:
		return -1, nil
	case len(fds) != 1:
		return -1, fmt.Errorf("devmem: OpenIPC: process %d sent %d descriptors, want 1", f.pid, len(fds))
	}
	keep = fds[0]
	return keep, nil
}

func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}
