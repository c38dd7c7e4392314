from tfbatch.cli import run

run()
