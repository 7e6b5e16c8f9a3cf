import sys

from stackdist.errors import install_interrupt_handler

install_interrupt_handler("stackdist", guarded=False)  # Ctrl-C during the imports: one line, exit 130

from .cli.main import main

sys.exit(main())
