//! `ralph report [RUN]`: the morning report of the latest run (or one, or
//! all): the HTML page written to a file, a short summary (or `--json`)
//! on stdout. The figures are built by `crate::report`.

use crate::cli::ReportArgs;
use crate::error::{Error, Result};
use crate::project::Project;
use crate::report::{self, Which};

pub(crate) fn report(project: &Project, args: &ReportArgs) -> Result<i32> {
    let root = project.root();
    let layout = project.layout();
    let which = match (&args.run, args.all) {
        (Some(_), true) => return Err(Error::usage("give a RUN or --all, not both")),
        (Some(id), false) => Which::Run(id.clone()),
        (None, true) => Which::All,
        (None, false) => Which::Latest,
    };
    // The thresholds and budgets drawn on the charts; a broken config must
    // not keep the user from seeing what happened.
    let config = project.config().ok();
    let (runs, default) = match &args.fleet_args.fleet {
        Some(fleet) => (
            vec![crate::workers::fleet::report(
                root,
                &args.fleet_args.remote,
                fleet,
                config.as_ref(),
            )?],
            layout.fleet().join(fleet).join("report.html"),
        ),
        None => (
            report::reports(layout, config.as_ref(), &which)?,
            report::default_path(layout),
        ),
    };
    let path = match &args.html {
        Some(p) => std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or(p.clone()),
        None => default,
    };
    // The summary is what the morning needs: a page that cannot be written
    // (a full disk) does not hide it; the failure is said after it.
    let written = match path.parent().map(std::fs::create_dir_all) {
        Some(Err(e)) => Err(Error::io(
            "cannot create",
            path.parent().unwrap_or(&path),
            e,
        )),
        _ => report::write_html(root, &path, &runs),
    };
    if let Err(refused @ Error::Usage { .. }) = written {
        return Err(refused);
    }
    let out = if args.json {
        let json = match runs.as_slice() {
            [one] if !args.all => serde_json::to_string(one),
            all => serde_json::to_string(all),
        };
        let json = json.map_err(|e| Error::wrap("cannot serialize the report", e))?;
        crate::text::printable_json(&json).into_owned() + "\n"
    } else {
        let tz = jiff::tz::TimeZone::system();
        let mut text: Vec<String> = runs.iter().map(|r| report::text::render(r, &tz)).collect();
        if written.is_ok() {
            text.push(format!("report: {}\n", path.display()));
        }
        text.join("\n")
    };
    super::print(&out)?;
    written.map(|()| 0)
}
