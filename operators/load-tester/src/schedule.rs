//! `spec.schedule`: when a scheduled LoadTest's runs start, a cron line
//! read in UTC ([`flotilla_shared::cron`], which CronJobs' schedules are
//! read with too).

pub use flotilla_shared::cron::Schedule;
