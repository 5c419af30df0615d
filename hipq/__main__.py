from hipq.cli import main

raise SystemExit(main())
