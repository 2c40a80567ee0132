"""Entry point of the controllers we start: ipyparallel's, ended with its kernel."""

if __name__ == "__main__":
    from tfmw_notebook import orphan_guard

    orphan_guard.start()
    from ipyparallel.controller.app import main

    main()
