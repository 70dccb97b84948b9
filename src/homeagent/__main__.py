from homeagent.cli.main import main

raise SystemExit(main())
