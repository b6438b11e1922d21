from indexer.cli import main

if __name__ == "__main__":  # not when a worker process (reconcile's) imports it as its main
    main()
