# The C side.  `make` builds lib/ (libperfex, libhwperf) and examples/;
# `make install PREFIX=/usr/local` (DESTDIR=dir to stage) installs the
# libraries, headers, the pkg-config files (hwperfd, libcpc, libperfctr,
# libpctr) and the man pages (lib/Makefile says where).
# The Python side (daemon, tools, client) installs with pip.
all:
	$(MAKE) -C lib
	$(MAKE) -C examples

install:
	$(MAKE) -C lib install

clean:
	$(MAKE) -C lib clean
	$(MAKE) -C examples clean

.PHONY: all install clean
