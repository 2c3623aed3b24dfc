from pyelmo.cli import run

run()
