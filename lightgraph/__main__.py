from lightgraph.cli import main

main()
