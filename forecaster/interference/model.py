"""Interference model: predicted speed (co-located / solo throughput) of each job of a pair.

Two parts. A structured one knows how the sharing mode divides a GPU (mechanism.py: time
slices, concurrent kernels), its few parameters fit per `sharing` value. Gradient-boosted trees
(LightGBM) over directed rows (self slowed by partner) read solo fingerprint features, their
symmetric combinations and workload-identity encodings, and either learn the structure's
residual, take its speed as a feature, serve without it, or serve the mean of the residual
trees and those without it ("mix"), whichever errs least on workloads held out inside the
training folds. Besides the point prediction, a pessimistic `p10`: the
point lowered by a conformal margin (where the structure serves, q times a learned scale of
how far off rows like this one are, conformal.fit_scale, or one margin per band of predicted
speed when too few rows; constant elsewhere), calibrated across workload groups (each group's
rows scored by a model fit without that group), so that about 10% of true speeds of *unseen* workloads fall below it (for known
workloads it is conservative). Schema 1 artifacts (a separate quantile booster) still load.
"""
from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd

from features.pairs import validate_pairs
from ground.errors import ForesightError
from forecaster.interference.admission import ADMIT_RISK, admission_table, bound_at
from forecaster.interference.artifact import load_model, save_model
from forecaster.interference.conformal import (MIN_BAND_SCORES, band, conformal, fit_scale,
                                                margin_scale, scaled_margin)
from forecaster.interference.familiar import FIELDS as FAMILIAR_FIELDS
from forecaster.interference.familiar import Familiarity
from forecaster.interference.features import directed, numeric_features, side_features
from forecaster.interference.identity import (IdentityEncoder, calibration_groups,
                                              out_of_fold_identity)
from forecaster.interference.matrix import predict_matrix
from forecaster.interference.mechanism import SharingMechanism
from forecaster.interference.solo import solo_table, with_solo_only

_CATEGORICAL = ["gpu_model", "sharing"]
_ID_MONOTONE = {"id_self_sens": 1, "id_partner_aggr": 1, "id_mf": 1, "mech_speed": 1}


#: Allowed values of the string arguments (the first: the default).
_CHOICES = {"margin": ("scaled", "band"), "ts_form": ("conserve", "ready", "busy"),
            "mps_form": ("conserve", "priority", "hogging"),
            "admit_margin": ("constant", "scaled")}


class InterferenceModel:
    """fit(pairs) / predict(pairs) / save(dir) / load(dir) over the pair table."""

    def __init__(self, n_estimators: int = 300, learning_rate: float = 0.05,
                 num_leaves: int = 15, min_child_samples: int = 10, alpha: float = 0.1,
                 n_folds: int = 5, use_identity: bool = True, mechanism: bool = True,
                 mps_form: str = "conserve", ts_form: str = "conserve", margin: str = "scaled",
                 admit_risk: float | None = ADMIT_RISK, admit_margin: str = "constant",
                 n_threads: int = 1, seed: int = 0) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.alpha = alpha
        self.n_folds = n_folds
        self.use_identity = use_identity
        self.mechanism = mechanism
        self.mps_form = mps_form  # "conserve", "priority" or "hogging" (mechanism.py)
        self.ts_form = ts_form  # "conserve", "ready" or "busy" (mechanism.timeslice_speed)
        self.margin = margin  # "scaled" (learned scale, conformal.fit_scale) or "band"
        # share of unsafe placements the co-location gate may admit (admission.py); None:
        # the gate holds minimum speeds to the p10
        self.admit_risk = admit_risk
        # the admission bound is point - q ("constant") or point - q x the p10's learned scale
        # ("scaled"); admission.py says why constant is the default
        self.admit_margin = admit_margin
        self.n_threads = n_threads
        self.seed = seed

    # ------------------------------------------------------------------ fitting
    def fit(self, pairs: pd.DataFrame, solo: pd.DataFrame | None = None) -> "InterferenceModel":
        """`solo`: optional solo fingerprints (`workload` and any side feature columns) of
        workloads that ran alone but may never have shared a GPU: the lookup of pods asked by
        workload key learns them too (a workload in `pairs` keeps its pairs' values)."""
        for name, ok in _CHOICES.items():
            if getattr(self, name) not in ok:
                raise ForesightError(f"{name} must be one of {', '.join(map(repr, ok))}, not "
                                     f"{getattr(self, name)!r}")
        if not 0.0 < self.alpha <= 0.5:
            raise ForesightError(f"alpha (the bound's level) must be in (0, 0.5], not {self.alpha}")
        if self.admit_risk is not None and not 0.0 < self.admit_risk < 0.5:
            raise ForesightError("admit_risk (the share of unsafe placements the co-location "
                                 f"gate may admit) must be in (0, 0.5), not {self.admit_risk}")
        pairs = validate_pairs(pairs, require_targets=True)
        d = directed(pairs)
        d = d[d["y"].notna()].reset_index(drop=True)  # unmeasured sides teach nothing
        self.side_features_ = side_features(d)
        self.categories_ = {c: sorted(d[c].unique().tolist()) for c in _CATEGORICAL if c in d}
        self.identity_ = bool(self.use_identity and (d["self_workload"] != "").any())
        if not self.side_features_ and not self.identity_:
            raise ForesightError("pair table has neither solo features nor workload names")
        # Trees add up their leaves: a new pair whose every feature sits at the calm end of the
        # training range can sum to speeds no pair ever reached (1.1-1.2 for a held-out
        # low-duty workload). Co-location does not speed a job up: predictions are capped at
        # 1.0, or at what the training speeds show above it (measurement noise, Gavel's >1).
        self.cap_ = float(max(1.0, np.quantile(d["y"], 0.99)))
        self.base_ = float(d["y"].mean())
        self.mechanism_ = self._fit_mechanism(d)
        # known workloads' measured solo features, for requests that name a workload only
        # (the extender's gate asks by workload key): the trees need them as much as the
        # forms do. Without them a name-only request reads every feature as missing; on the
        # demo's history that erred more than the training median (MAE 0.067 vs 0.049;
        # 0.033 with them, 0.032 with the pair's own features: bench/interference_name_only.py)
        self.solo_ = with_solo_only(solo_table(pairs), solo)
        # the workloads the admission bound was calibrated on (familiar.py)
        fam = [f for f in FAMILIAR_FIELDS if f in self.side_features_]
        self.familiar_ = Familiarity().fit(
            d["self_workload"], d[[f"self_{f}" for f in fam]].set_axis(fam, axis=1))
        X, y, rows = self._train_matrix(d)
        self.feature_names_ = list(X.columns)
        self.p10_ = None
        self._fit_p10(d, X, y, rows)  # also picks how structure and trees combine (blend_)
        if self.blend_ == "plain":  # exactly the model without a structured part
            X = X.drop(columns="mech_speed")
            self.feature_names_ = list(X.columns)
        self.point_ = self._train(X, y, {"objective": "regression"},
                                  None if self.blend_ in ("trees", "plain") else self._init(X))
        self.plain_ = self._train(X.drop(columns="mech_speed"), y, {"objective": "regression"}) \
            if self.blend_ == "mix" else None
        self.encoder_ = self._encoder().fit(d["self_workload"], d["partner_workload"],
                                            d["y"]) if self.identity_ else None
        self.metrics_ = {"pairs": int(len(pairs)), "directed_rows": int(len(d)),
                         "training_rows": int(len(X)), "conformal_offset": self.offset_,
                         "band_offsets": self.band_offsets_, "blend": self.blend_,
                         "scale_q": self.scale_q_, "scale_q_mode": self.scale_q_mode_,
                         "admit_q": self.admit_q_,
                         "held_out_mae": self.blend_mae_,
                         "mechanism_modes": self.mechanism_.modes_ if self.mechanism_ else [],
                         "calibration_rows": self.calibration_rows_,
                         "workloads": int(d["self_workload"].nunique())}
        return self

    def _fit_mechanism(self, d: pd.DataFrame) -> SharingMechanism | None:
        """The structured part, or None (switched off, or no mode with busy shares to fit)."""
        if not self.mechanism:
            return None
        m = SharingMechanism(mps_form=self.mps_form, ts_form=self.ts_form).fit(
            d, d["y"].to_numpy())
        return m if m.modes_ else None

    def _init(self, X: pd.DataFrame) -> np.ndarray | None:
        """Where the trees start: the mechanism's speed, the training mean where it has none
        (None without a mechanism: LightGBM boosts from the average, as before)."""
        if "mech_speed" not in X:
            return None
        return np.where(np.isnan(X["mech_speed"]), self.base_, X["mech_speed"]).astype(float)

    def _encoder(self) -> IdentityEncoder:
        return IdentityEncoder(seed=self.seed)

    def _fit_p10(self, d: pd.DataFrame, X: pd.DataFrame, y: np.ndarray,
                 rows: np.ndarray) -> None:
        """Cross-conformal margin, grouped by workload (see margin_scale for the score).

        For each group k, an inner point model is fit on the training rows that touch no
        workload of k (a third of the rounds at three times the rate: about the same
        capacity, a fraction of the cost) and scores the rows that touch k, their identity encodings computed
        without k. The pooled scores' (1 - alpha) conformal quantile is the margin.
        """
        gs, gp, k = calibration_groups(d, self.identity_, self.seed)
        rounds = max(20, self.n_estimators // 3)
        # "intermediate" monotone constraints: ~30% cheaper per round than the point model's
        # "advanced", and these fits only estimate the size of held-out errors
        extra = {"objective": "regression", "rounds": rounds,
                 "learning_rate": self.learning_rate * self.n_estimators / rounds,
                 "monotone_constraints_method": "intermediate"}
        cands: dict[str, list[np.ndarray]] = {}
        ys, ons, mats, gids = [], [], [], []
        for g in range(k):
            touch = (gs == g) | (gp == g)
            fit_rows = ~touch[rows]
            if touch.sum() == 0 or fit_rows.sum() < 20:
                continue
            rest = d[~touch]
            mech = self._fit_mechanism(rest) if self.mechanism_ is not None else None
            Xf = X[fit_rows]
            if mech is not None:  # the structured part, too, never saw the held-out group
                Xf = Xf.assign(mech_speed=mech.predict(d.iloc[rows[fit_rows]]))
            elif "mech_speed" in Xf:  # too few rows left to fit any mode: no structured part
                Xf = Xf.assign(mech_speed=np.nan)
            inner = self._train(Xf, y[fit_rows], extra, self._init(Xf))
            cal = d[touch].reset_index(drop=True)
            enc = (self._encoder().fit(rest["self_workload"], rest["partner_workload"],
                                       rest["y"]) if self.identity_ else None)
            Xc = self._matrix(cal, enc, mech)[list(X.columns)]
            Xn, init = Xc.to_numpy(dtype=np.float64), self._init(Xc)
            res = inner.predict(Xn, num_threads=self.n_threads)
            res = np.clip(res + (0.0 if init is None else init), 0.01, self.cap_)
            on_mech = np.isfinite(Xc["mech_speed"].to_numpy()) if mech is not None \
                else np.zeros(len(cal), bool)
            cands.setdefault("residual", []).append(res)
            if self.mechanism_ is not None:
                free = self._train(Xf, y[fit_rows], extra)
                cands.setdefault("trees", []).append(
                    np.clip(free.predict(Xn, num_threads=self.n_threads), 0.01, self.cap_))
                plain = self._train(Xf.drop(columns="mech_speed"), y[fit_rows], extra)
                Xp = Xc.drop(columns="mech_speed").to_numpy(dtype=np.float64)
                cands.setdefault("plain", []).append(
                    np.clip(plain.predict(Xp, num_threads=self.n_threads), 0.01, self.cap_))
                cands.setdefault("structure", []).append(
                    np.where(on_mech, np.clip(np.nan_to_num(init), 0.01, self.cap_), res))
            ys.append(cal["y"].to_numpy())
            ons.append(on_mech)
            mats.append(Xn)
            gids.append(np.full(len(cal), g))
        n = sum(len(v) for v in ys)
        if n < 10:
            raise ForesightError(f"too few pairs to calibrate p10 ({len(d) // 2} pairs)")
        yb, on = np.concatenate(ys), np.concatenate(ons)
        # How structure and trees combine is chosen on workloads the fits did not see: the
        # structure alone (a few dozen real pairs teach trees little), trees on its residual,
        # trees with its speed as a feature, or trees without it (a history the forms do not
        # describe, e.g. the Gavel-calibrated simulator, where the structure only misleads).
        if "plain" in cands:  # or the mean of the residual and the plain trees' speeds
            cands["mix"] = [(r + p) / 2 for r, p in zip(cands["residual"], cands["plain"])]
        mae = {k: float(np.mean(np.abs(np.concatenate(v) - yb))) for k, v in cands.items()}
        self.blend_ = min(mae, key=mae.get)
        if "plain" in mae and mae["structure"] > mae["plain"]:
            # forms that lose to trees without them do not describe this cluster: a blend
            # that won by chance on the calibration folds is not trusted (it lost on unseen
            # workloads of the Gavel-calibrated simulator; so did "mix" here: synthetic MAE
            # 0.0259 -> 0.0290, bench/results/interference_synthetic.md)
            self.blend_ = "plain"
        self.blend_mae_ = mae if self.mechanism_ is not None else {}
        chosen = np.concatenate(cands[self.blend_])
        mat = np.vstack(mats)
        if self.blend_ == "plain":  # served without the structure's speed: nor is the scale fit
            mat = np.delete(mat, list(X.columns).index("mech_speed"), axis=1)
            if self.margin != "scaled":  # one margin, as without a structure
                on = np.zeros(len(yb), bool)
        self.offset_ = conformal((chosen - yb)[~on] / margin_scale(chosen[~on]), self.alpha)
        sc, bands = (chosen - yb)[on], band(chosen[on])
        # pooled over modes: per mode and band the dev folds had too few scores to be stable
        self.band_offsets_ = {"": conformal(sc, self.alpha)} if len(sc) else {}
        for b in np.unique(bands):
            if (bands == b).sum() >= MIN_BAND_SCORES:
                self.band_offsets_[str(b)] = conformal(sc[bands == b], self.alpha)
        self.scale_, self.scale_q_, self.scale_q_mode_, self.admit_q_ = None, 0.0, {}, {}
        if on.any() and self.margin == "scaled":
            # also where trees serve alone ("plain"): the rows the forms cover still get a
            # scale of their own (with one margin, 29 % of the H200 pool's folds got a margin
            # as wide as the worst rows need)
            mat = mat[on]
            modes = self._modes(mat)
            fitted = fit_scale(np.column_stack([mat, chosen[on]]), (chosen - yb)[on],
                               np.concatenate(gids)[on], self.alpha, self.seed,
                               self.n_threads, modes)
            if fitted is not None:
                self.scale_, self.scale_q_, self.scale_q_mode_ = fitted[:3]
                if self.admit_risk is not None:
                    unit = fitted.held_scale if self.admit_margin == "scaled" \
                        else np.ones(int(on.sum()))
                    self.admit_q_ = admission_table(chosen[on], yb[on], unit, modes,
                                                    self.admit_risk)
        self.calibration_rows_ = int(n)

    def _modes(self, X: np.ndarray) -> np.ndarray:
        """The sharing mode of each row of a feature matrix ("" where unknown)."""
        cats = list(self.categories_.get("sharing", []))
        return np.array(cats + [""], object)[self._mode_index(X, len(cats))]

    def _mode_index(self, X: np.ndarray, n_cats: int) -> np.ndarray:
        """Each row's sharing category code, n_cats where unknown."""
        if "sharing" not in self.feature_names_ or not n_cats:
            return np.full(len(X), n_cats, int)
        code = X[:, self.feature_names_.index("sharing")]
        return np.where(np.isnan(code), n_cats, code).astype(int)

    def _train_matrix(self, d: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """Training features, targets and each row's index into `d`; identity encodings out
        of fold (see out_of_fold_identity: a row of `d` may appear more than once)."""
        if not self.identity_:
            return self._matrix(d, None), d["y"].to_numpy(), np.arange(len(d))
        idx, ids = out_of_fold_identity(d, self.n_folds, self.seed, {"seed": self.seed})
        rows = d.iloc[idx].reset_index(drop=True)
        base = self._matrix(rows, None)
        return pd.concat([base, ids], axis=1), rows["y"].to_numpy(), idx

    def _matrix(self, d: pd.DataFrame, enc: IdentityEncoder | None,
                mech: SharingMechanism | None | str = "fitted") -> pd.DataFrame:
        for f in self.side_features_:  # a column seen in training but absent now -> missing
            for role in ("self", "partner"):
                if f"{role}_{f}" not in d:
                    d = d.assign(**{f"{role}_{f}": np.nan})
        X, _ = numeric_features(d, self.side_features_)
        for c, cats in self.categories_.items():
            codes = pd.Categorical(d[c] if c in d else pd.Series([None] * len(d)),
                                   categories=cats).codes
            X[c] = np.where(codes < 0, np.nan, codes).astype(float)
        mech = self.mechanism_ if isinstance(mech, str) else mech
        if mech is not None:
            X["mech_speed"] = mech.predict(d)
        elif self.mechanism_ is not None:  # a calibration fold whose rest fit no mode
            X["mech_speed"] = np.nan
        if enc is not None:
            X = pd.concat([X.reset_index(drop=True),
                           enc.transform(d["self_workload"], d["partner_workload"])], axis=1)
        return X.reset_index(drop=True)

    def _train(self, X: pd.DataFrame, y: np.ndarray, extra: dict,
               init: np.ndarray | None = None) -> lgb.Booster:
        extra = dict(extra)
        rounds = extra.pop("rounds", self.n_estimators)
        _, mono = numeric_features(pd.DataFrame({f"{r}_{f}": [0.0] for f in self.side_features_
                                                 for r in ("self", "partner")}),
                                   self.side_features_)
        params = {"learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
                  "min_data_in_leaf": self.min_child_samples, "feature_fraction": 0.9,
                  "max_bin": 63,  # coarser histograms: ~2x faster, speeds need no finer cuts
                  "num_threads": self.n_threads, "seed": self.seed, "verbosity": -1,
                  "deterministic": True, **extra}
        params["monotone_constraints"] = [mono.get(c, _ID_MONOTONE.get(c, 0)) for c in X]
        params.setdefault("monotone_constraints_method", "advanced")
        cats = [c for c in X.columns if c in _CATEGORICAL]
        ds = lgb.Dataset(X, y, init_score=init, categorical_feature=cats or "auto",
                         free_raw_data=True)
        return lgb.train(params, ds, num_boost_round=rounds)

    # --------------------------------------------------------------- prediction
    def predict(self, pairs: pd.DataFrame, admit: bool = False) -> pd.DataFrame:
        """`a_speed_pred`, `b_speed_pred`, `a_speed_p10`, `b_speed_p10`, one row per pair;
        with `admit`, also `a_speed_unit`, `b_speed_unit`: the admission margin unit (1, or the
        learned scale with `admit_margin="scaled"`) that
        `admit_bound` turns into the bound a minimum speed is held to (NaN: no scale)."""
        if not hasattr(self, "point_"):
            raise ForesightError("interference model is not fitted")
        X = self.predict_matrix(pairs)
        n = len(X) // 2
        # The boosters are called directly on a float64 C-ordered array: no pandas checks.
        prior = X[:, self.feature_names_.index("mech_speed")] \
            if "mech_speed" in self.feature_names_ and self.mechanism_ is not None else None
        point = self.point_.predict(X, num_threads=self.n_threads)
        if prior is not None and self.blend_ != "trees":  # from the structure
            point = np.where(np.isnan(prior), point + self.base_,
                             prior + (point if self.blend_ in ("residual", "mix") else 0.0))
        if getattr(self, "plain_", None) is not None:  # "mix": half the plain trees' speed
            plain = np.delete(X, self.feature_names_.index("mech_speed"), axis=1)
            point = (np.clip(point, 0.01, self.cap_)
                     + np.clip(self.plain_.predict(plain, num_threads=self.n_threads),
                               0.01, self.cap_)) / 2
        point = np.clip(point, 0.01, self.cap_)
        unit = np.full(len(point), np.nan)
        if self.p10_ is None:
            low = point - self.offset_ * margin_scale(point)
            cats = list(self.categories_.get("sharing", []))
            code = self._mode_index(X, len(cats))
            if prior is None and self.blend_ == "plain" and self.mechanism_ is not None:
                # trees serve alone: the scale covers the rows of the modes the forms cover
                covered = np.isin(np.array(cats + [""], object)[code], self.mechanism_.modes_)
                prior = np.where(covered, 0.0, np.nan)
            if prior is not None and self.scale_ is not None:
                per = [self.scale_q_mode_.get(c, self.scale_q_) for c in cats] + [self.scale_q_]
                q = np.asarray(per)[code]
                unit = np.where(np.isnan(prior), np.nan, scaled_margin(
                    self.scale_, 1.0, np.column_stack([X, point]), self.n_threads))
                low = np.where(np.isnan(prior), low, point - q * unit)
                if getattr(self, "admit_margin", "scaled") == "constant":
                    unit = np.where(np.isnan(unit), np.nan, 1.0)
            elif prior is not None and self.band_offsets_:
                off = self.band_offsets_
                q = np.array([off.get(str(b), off.get("", 0.0)) for b in band(point)])
                low = np.where(np.isnan(prior), low, point - q)
        else:  # a schema 1 artifact
            low = self.p10_.predict(X, num_threads=self.n_threads) - self.offset_
        low = np.minimum(np.clip(low, 0.0, 2.0), point)
        out = {"a_speed_pred": point[:n], "b_speed_pred": point[n:],
               "a_speed_p10": low[:n], "b_speed_p10": low[n:]}
        if admit:
            # a side unlike every trained workload: no calibrated bound (inf: refused)
            unit = np.where(self._unfamiliar(X, n), np.inf, unit)
            out.update(a_speed_unit=unit[:n], b_speed_unit=unit[n:])
        return pd.DataFrame(out)

    def _unfamiliar(self, X: np.ndarray, n: int) -> np.ndarray:
        """Each directed row whose self or partner is unfamiliar (familiar.py)."""
        fam = getattr(self, "familiar_", None)
        if fam is None or fam.threshold_ is None:
            return np.zeros(len(X), bool)
        # fields_ are side features: every one has a self_ column
        vals = np.column_stack([X[:, self.feature_names_.index(f"self_{f}")]
                                for f in fam.fields_])
        side = fam.unfamiliar_values(vals)  # rows a then b: each side once
        own = side[:n] | side[n:]
        return np.concatenate([own, own])

    def admit_bound(self, sharing: str, point: np.ndarray, unit: np.ndarray, p10: np.ndarray,
                    floor: float | np.ndarray) -> np.ndarray:
        """The speed a minimum speed `floor` is held to (admission.bound_at)."""
        return bound_at(getattr(self, "admit_q_", {}).get(sharing, {}), point, unit, p10, floor)

    def predict_matrix(self, pairs: pd.DataFrame) -> np.ndarray:
        """The directed feature matrix of a pair table (matrix.predict_matrix)."""
        return predict_matrix(self, pairs)

    # ----------------------------------------------------------- persistence
    def save(self, path: str | Path) -> Path:
        return save_model(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "InterferenceModel":
        return load_model(cls, path)
