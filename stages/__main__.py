from stages.cli.main import main

main()
