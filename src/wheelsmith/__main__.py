from wheelsmith.cli import main

main()
