from lucky_monitor.cli import main

raise SystemExit(main())
