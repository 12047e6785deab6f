// Package lvmvm boots the real-LVM test VM: Debian's kernel under qemu (TCG)
// with an initramfs holding lvm2 (build-image.sh), the project's static
// binaries passed in over 9p, and qemu's user network forwarding chosen
// guest ports to 127.0.0.1 only. Host-side tests and the demo drive lvmd in
// it through those forwards; it never touches the host's own disks.
package lvmvm
