// Types that check.py's generated files check a dashboard JSON against.
//
// Everything here is derived from @grafana/schema (Grafana's published schema,
// generated from its CUE "kinds"); nothing is written by hand except how the
// types are adapted to JSON:
//
//  * Json<T>: string enums (e.g. FieldColorModeId, ThresholdsMode, MappingType)
//    are replaced by their string values, because a JSON file can only contain
//    the literal "palette-classic", never the TS enum member. Numeric enums stay
//    as they are (a numeric literal that is a member value is accepted, any other
//    number is rejected).
//  * Panels are checked one by one (check.py emits one typed const per panel),
//    as PanelJson, RowPanelJson for `"type": "row"`, or PanelOf<"timeseries">
//    etc. for the panel plugins whose options @grafana/schema ships. That avoids
//    the Panel | RowPanel union, whose excess-property check accepts a key that
//    exists in *either* member (e.g. `"options"` on a row).
//  * Plugin options and fieldConfig.defaults.custom are DeepPartial: Grafana fills
//    in defaults for missing ones, so only unknown keys and wrong types fail.
//
// Loose by construction in @grafana/schema (and therefore here): panel
// `targets` (Record<string, unknown>: queries are datasource-specific), options
// and fieldConfig.defaults.custom of panel types not listed in PanelTypes,
// `overrides[].properties[].value`, transformation and matcher `options`,
// fieldConfig `links`, variable `query` objects.

import type * as S from "@grafana/schema";
import type * as AnnoList from "@grafana/schema/dist/esm/raw/composable/annotationslist/panelcfg/x/AnnotationsListPanelCfg_types.gen";
import type * as BarChart from "@grafana/schema/dist/esm/raw/composable/barchart/panelcfg/x/BarChartPanelCfg_types.gen";
import type * as BarGauge from "@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen";
import type * as Candlestick from "@grafana/schema/dist/esm/raw/composable/candlestick/panelcfg/x/CandlestickPanelCfg_types.gen";
import type * as DashList from "@grafana/schema/dist/esm/raw/composable/dashboardlist/panelcfg/x/DashboardListPanelCfg_types.gen";
import type * as Gauge from "@grafana/schema/dist/esm/raw/composable/gauge/panelcfg/x/GaugePanelCfg_types.gen";
import type * as Heatmap from "@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen";
import type * as Histogram from "@grafana/schema/dist/esm/raw/composable/histogram/panelcfg/x/HistogramPanelCfg_types.gen";
import type * as Logs from "@grafana/schema/dist/esm/raw/composable/logs/panelcfg/x/LogsPanelCfg_types.gen";
import type * as News from "@grafana/schema/dist/esm/raw/composable/news/panelcfg/x/NewsPanelCfg_types.gen";
import type * as PieChart from "@grafana/schema/dist/esm/raw/composable/piechart/panelcfg/x/PieChartPanelCfg_types.gen";
import type * as Stat from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";
import type * as StateTimeline from "@grafana/schema/dist/esm/raw/composable/statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen";
import type * as StatusHistory from "@grafana/schema/dist/esm/raw/composable/statushistory/panelcfg/x/StatusHistoryPanelCfg_types.gen";
import type * as Table from "@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen";
import type * as Text from "@grafana/schema/dist/esm/raw/composable/text/panelcfg/x/TextPanelCfg_types.gen";
import type * as TimeSeries from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";
import type * as Trend from "@grafana/schema/dist/esm/raw/composable/trend/panelcfg/x/TrendPanelCfg_types.gen";

type IsAny<T> = 0 extends 1 & T ? true : false;

/** T as it can appear in JSON: string enum members become their string values. */
export type Json<T> =
  IsAny<T> extends true ? T
  : unknown extends T ? T
  : T extends string ? `${T}`
  : T extends number | boolean | null | undefined ? T
  : T extends ReadonlyArray<infer U> ? Array<Json<U>>
  : T extends object ? { [K in keyof T]: Json<T[K]> }
  : T;

/** Json<T> with every object property optional, at every depth. */
export type DeepPartialJson<T> =
  IsAny<T> extends true ? T
  : unknown extends T ? T
  : T extends string ? `${T}`
  : T extends number | boolean | null | undefined ? T
  : T extends ReadonlyArray<infer U> ? Array<DeepPartialJson<U>>
  : T extends object ? { [K in keyof T]?: DeepPartialJson<T[K]> }
  : T;

type Flatten<T> = { [K in keyof T]: T[K] };

export interface DashboardJson extends Json<S.Dashboard> {}
export interface PanelJson extends Json<S.Panel> {}
export interface RowPanelJson extends Json<S.RowPanel> {}

/** Panel plugin id -> the options / custom field config its panelcfg schema declares. */
interface PanelTypes {
  annolist: { options: AnnoList.Options; custom: Record<string, unknown> };
  barchart: { options: BarChart.Options; custom: BarChart.FieldConfig };
  bargauge: { options: BarGauge.Options; custom: Record<string, unknown> };
  candlestick: { options: Candlestick.Options; custom: Candlestick.FieldConfig };
  dashlist: { options: DashList.Options; custom: Record<string, unknown> };
  gauge: { options: Gauge.Options; custom: Record<string, unknown> };
  heatmap: { options: Heatmap.Options; custom: Heatmap.FieldConfig };
  histogram: { options: Histogram.Options; custom: Histogram.FieldConfig };
  logs: { options: Logs.Options; custom: Record<string, unknown> };
  news: { options: News.Options; custom: Record<string, unknown> };
  piechart: { options: PieChart.Options; custom: PieChart.FieldConfig };
  stat: { options: Stat.Options; custom: Record<string, unknown> };
  "state-timeline": { options: StateTimeline.Options; custom: StateTimeline.FieldConfig };
  "status-history": { options: StatusHistory.Options; custom: StatusHistory.FieldConfig };
  table: { options: Table.Options; custom: Table.FieldConfig };
  text: { options: Text.Options; custom: Record<string, unknown> };
  timeseries: { options: TimeSeries.Options; custom: TimeSeries.FieldConfig };
  trend: { options: Trend.Options; custom: Trend.FieldConfig };
}

type FieldConfigSourceJson<Custom> = Flatten<
  Omit<Json<S.FieldConfigSource>, "defaults"> & {
    defaults: Flatten<Omit<Json<S.FieldConfig>, "custom"> & { custom?: DeepPartialJson<Custom> }>;
  }
>;

type TypedPanel<P extends { options: unknown; custom: unknown }> = Flatten<
  Omit<PanelJson, "options" | "fieldConfig"> & {
    options?: DeepPartialJson<P["options"]>;
    fieldConfig?: FieldConfigSourceJson<P["custom"]>;
  }
>;

/** The type a panel whose `"type"` is K is checked against. */
export type PanelOf<K extends string> = K extends keyof PanelTypes ? TypedPanel<PanelTypes[K]> : PanelJson;

/** Panel plugin ids whose options and custom field config are checked (not just the generic Panel). */
export type TypedPanelId = keyof PanelTypes;
